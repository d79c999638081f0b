"""Patches on the optimisation: fused/foreach optimizers, zero_grad(set_to_none=True), and the loss passed to
backward (captured per step for the numerics guard; scaled by a GradScaler under float16 autocast)."""

from __future__ import annotations

import inspect
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

from stepscope.tune.points.failure import owned_by
from stepscope.tune.points.undo import Patcher, user_site
from stepscope.tune.wire import CallSite, OptimizerSite, Settings

MAX_SITES = 16


class OptimizerPatch:
    """Records each optimizer built (class, foreach/fused, call site); `fused_optimizer` sets fused=True (or
    foreach=True where fused is not offered) on the constructors of torch.optim's optimizers."""

    def __init__(self, settings: Settings, applied: Counter[str]) -> None:
        self.settings = settings
        self.applied = applied
        self.fused: str | None = None  # "fused" | "foreach"
        self.pid = os.getpid()

    def install(self, patcher: Patcher) -> None:
        import torch

        base = torch.optim.Optimizer.__init__
        patch = self

        def __init__(optimizer: Any, params: Any, defaults: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            base(optimizer, params, defaults, *args, **kwargs)
            if os.getpid() == patch.pid:
                patch._record(optimizer, defaults)

        patcher.replace(torch.optim.Optimizer, "__init__", __init__)
        if self.fused is not None:
            for cls in _optimizer_classes():
                patcher.replace(cls, "__init__", self._fusing(cls.__init__))

    def _fusing(self, original: Callable[..., None]) -> Callable[..., None]:
        names = set(inspect.signature(original).parameters)
        patch = self

        def __init__(optimizer: Any, params: Any, *args: Any, **kwargs: Any) -> None:
            if kwargs.get("fused") is None and kwargs.get("foreach") is None and os.getpid() == patch.pid:
                with owned_by("fused_optimizer"):
                    params = list(params)  # it may be a generator: looked at here, then passed on
                    want = patch.fused if patch.fused in names else "foreach"
                    if want in names and (want != "fused" or _all_on_cuda(params)):
                        kwargs[want] = True
                        patch.applied["fused_optimizer"] += 1
            original(optimizer, params, *args, **kwargs)

        return __init__

    def _record(self, optimizer: Any, defaults: dict[str, Any]) -> None:
        if len(self.settings.optimizers) >= MAX_SITES:
            return
        file, line = user_site(3)
        self.settings.optimizers.append(OptimizerSite(
            file=file, line=line, cls=type(optimizer).__name__, foreach=defaults.get("foreach"),
            fused=defaults.get("fused"), supports_fused="fused" in defaults))


def _optimizer_classes() -> list[type]:
    import torch

    found = []
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer:
            params = inspect.signature(cls.__init__).parameters
            if "fused" in params or "foreach" in params:
                found.append(cls)
    return found


def _all_on_cuda(params: list[Any]) -> bool:
    tensors = [p for group in params for p in (group["params"] if isinstance(group, dict) else [group])]
    return bool(tensors) and all(getattr(t, "is_cuda", False) for t in tensors)


class ZeroGradPatch:
    """Records the set_to_none each zero_grad call site uses; `set_to_none` makes it True."""

    def __init__(self, settings: Settings, applied: Counter[str]) -> None:
        self.settings = settings
        self.applied = applied
        self.force = False
        self._seen: set[tuple[str | None, int | None]] = set()
        self.pid = os.getpid()

    def install(self, patcher: Patcher) -> None:
        import torch

        for owner in (torch.optim.Optimizer, torch.nn.Module):
            patcher.replace(owner, "zero_grad", self._wrap(owner.zero_grad))

    def _wrap(self, original: Callable[..., None]) -> Callable[..., None]:
        patch = self

        def zero_grad(obj: Any, set_to_none: bool = True) -> None:
            if os.getpid() != patch.pid:
                original(obj, set_to_none=set_to_none)
                return
            if len(patch._seen) < MAX_SITES:
                site = user_site(2)
                if site not in patch._seen:
                    patch._seen.add(site)
                    patch.settings.zero_grad.append(CallSite(file=site[0], line=site[1], value=bool(set_to_none)))
            if patch.force and not set_to_none:
                set_to_none = True
                patch.applied["set_to_none"] += 1
            original(obj, set_to_none=set_to_none)

        return zero_grad


class LossCapture:
    """The first scalar passed to `Tensor.backward` in each step, kept on its device until the timing is over."""

    def __init__(self, step_index: Callable[[], int]) -> None:
        self.step_index = step_index
        self.losses: dict[int, Any] = {}
        self.scaler: Any = None  # a GradScaler, under float16 autocast
        self.pid = os.getpid()

    def install(self, patcher: Patcher) -> None:
        import torch

        original = torch.Tensor.backward
        capture = self

        def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if os.getpid() == capture.pid and tensor.numel() == 1 and tensor.is_floating_point():
                step = capture.step_index()
                if step not in capture.losses:  # a copy: a CUDA-graph output is overwritten by the next replay
                    capture.losses[step] = tensor.detach().clone()
                if capture.scaler is not None:
                    tensor = capture.scaler.scale(tensor)
            return original(tensor, *args, **kwargs)

        patcher.replace(torch.Tensor, "backward", backward)

    def values(self) -> list[float | None]:
        """Per step from the first, as floats (this reads the device: call it after the timing)."""
        if not self.losses:
            return []
        last = max(self.losses)
        return [float(self.losses[i].float().item()) if i in self.losses else None for i in range(last + 1)]


def install_grad_scaler(patcher: Patcher, capture: LossCapture, device_type: str) -> None:
    """float16 autocast needs loss scaling: backward on the scaled loss, gradients unscaled before each optimizer
    step and dropped (the step skipped) when they overflowed, the scale updated after."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    scaler = torch.amp.GradScaler(device_type)
    capture.scaler = scaler

    def before(optimizer: Any, args: Any, kwargs: Any) -> None:
        scaler.unscale_(optimizer)
        state = scaler._per_optimizer_states[id(optimizer)]
        if sum(v.item() for v in state["found_inf_per_device"].values()):
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None  # an optimizer skips parameters without a gradient: the step is skipped

    def after(optimizer: Any, args: Any, kwargs: Any) -> None:
        scaler.update()

    handles = [register_optimizer_step_pre_hook(before), register_optimizer_step_post_hook(after)]
    patcher.on_undo(lambda: [h.remove() for h in handles])
