"""Patches on the model: found at its first forward (the first module with parameters called outside any other
module, as `stepscope run` finds it), recorded, and changed in place: channels_last, autocast around its forward,
torch.compile (CUDA graphs with mode="reduce-overhead"). Also the backend flags (TF32, cuDNN benchmark)."""

from __future__ import annotations

import functools
import os
from collections import Counter
from typing import Any

from stepscope.tune.points.failure import owned_by
from stepscope.tune.points.uint8 import Uint8Batches
from stepscope.tune.points.undo import Patcher, user_site
from stepscope.tune.wire import CallSite, ModelInfo, Settings


class ModelPatch:
    def __init__(self, settings: Settings, applied: Counter[str], uint8: Uint8Batches | None = None) -> None:
        self.settings = settings
        self.applied = applied
        self.uint8 = uint8 or Uint8Batches()
        self._uint8_hooked = False
        self.channels_last = False
        self.amp_dtype: str | None = None  # "bfloat16" | "float16"
        self.compile_mode: str | None = None  # "default" | "reduce-overhead"
        self.model: Any = None
        self._depth = 0
        self._handles: list[Any] = []
        self._patcher: Patcher | None = None
        self.pid = os.getpid()

    def install(self, patcher: Patcher) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._patcher = patcher
        self._handles = [register_module_forward_pre_hook(self._before),
                         register_module_forward_hook(self._after, always_call=True)]
        patcher.on_undo(self._remove_hooks)

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _before(self, module: Any, args: Any) -> Any:
        if (self.model is None and self._depth == 0 and os.getpid() == self.pid
                and next(iter(module.parameters()), None) is not None):
            self._remove_hooks()  # global hooks slow every module call: only the first one is needed
            self.model = module
            file, line = user_site(3)
            self.settings.model_site = CallSite(file=file, line=line)
            self.settings.model = describe(module)
            self._apply(module)
            return self._uint8_inputs(module, args)
        self._depth += 1
        return None

    def _uint8_inputs(self, module: Any, args: Any) -> Any:
        """A uint8 image batch that reaches the model uncopied is converted here (a program on the CPU)."""
        if not self.uint8.active or not isinstance(args, tuple):
            return None
        if module is self.model and self._patcher is not None and not self._uint8_hooked:
            self._uint8_hooked = True
            handle = module.register_forward_pre_hook(self._uint8_inputs)
            self._patcher.on_undo(handle.remove)
        if not any(self.uint8.marked(a) for a in args):
            return None
        return tuple(self.uint8.convert(a) if self.uint8.marked(a) else a for a in args)

    def _after(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(self._depth - 1, 0)

    def _apply(self, model: Any) -> None:
        import torch

        assert self._patcher is not None
        if self.channels_last and self.settings.model is not None and self.settings.model.conv:
            with owned_by("channels_last"):
                model.to(memory_format=torch.channels_last)  # parameters change in place: the optimizer keeps them
                self._patcher.on_undo(lambda: model.to(memory_format=torch.contiguous_format))
                self.applied["channels_last"] += 1
        if self.amp_dtype is not None:
            with owned_by("amp"):
                self._patcher.replace(model, "forward", autocast_forward(model.forward, _device_type(model),
                                                                         getattr(torch, self.amp_dtype)))
                self.applied["amp"] += 1
        if self.compile_mode is not None and hasattr(model, "compile"):
            fix = "cuda_graphs" if self.compile_mode == "reduce-overhead" else "torch_compile"
            with owned_by(fix):
                model.compile(**({} if self.compile_mode == "default" else {"mode": self.compile_mode}))
                self._patcher.on_undo(lambda: setattr(model, "_compiled_call_impl", None))
                self.applied["torch_compile"] += 1
                if self.compile_mode == "reduce-overhead":
                    self.applied["cuda_graphs"] += 1


def autocast_forward(forward: Any, device_type: str, dtype: Any) -> Any:
    """`forward` under autocast; half-precision outputs are returned as float32, so the loss is computed in
    float32 as it is when the loss is inside the autocast region (loss functions autocast to float32)."""
    import torch
    from torch.utils._pytree import tree_map_only

    def to_float32(t: torch.Tensor) -> torch.Tensor:
        return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type, dtype=dtype):
            out = forward(*args, **kwargs)
        return tree_map_only(torch.Tensor, to_float32, out)

    return run


def _device_type(model: Any) -> str:
    param = next(iter(model.parameters()))
    return param.device.type


def describe(model: Any) -> ModelInfo:
    import torch

    params = list(model.parameters())
    floating = next((p for p in params if p.is_floating_point()), params[0])
    device = floating.device
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    four_d = next((p for p in params if p.dim() == 4), None)
    channels_last = four_d is not None and not four_d.is_contiguous() and four_d.is_contiguous(
        memory_format=torch.channels_last)
    return ModelInfo(
        cls=type(model).__name__, module=type(model).__module__, parameters=sum(p.numel() for p in params),
        dtype=str(floating.dtype).removeprefix("torch."), device=str(device), conv=bool(convs),
        linear=any(isinstance(m, torch.nn.Linear) for m in model.modules()),
        compiled=getattr(model, "_compiled_call_impl", None) is not None or hasattr(model, "_orig_mod"),
        autocast=bool(torch.is_autocast_enabled(device.type)), channels_last=channels_last)


def install_backends(patcher: Patcher, applied: Counter[str], *, tf32: bool, cudnn_benchmark: bool) -> None:
    """`tf32`: TF32 tensor cores for float32 matmuls and convolutions; `cudnn_benchmark`: autotuned convolutions."""
    import torch

    flags = []
    if tf32:
        flags += [(torch.backends.cuda.matmul, "allow_tf32", "tf32"), (torch.backends.cudnn, "allow_tf32", "tf32")]
    if cudnn_benchmark:
        flags.append((torch.backends.cudnn, "benchmark", "cudnn_benchmark"))
    for owner, name, fix in flags:
        before = getattr(owner, name)
        if not before:
            setattr(owner, name, True)
            patcher.on_undo(lambda owner=owner, name=name, before=before: setattr(owner, name, before))
            applied[fix] += 1
