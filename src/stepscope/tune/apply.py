"""Installing fixes from outside the program: one small installer per fix id, each setting its part of the patch
points (DataLoader, copies, model, optimizer, zero_grad, backend flags). Everything is undone by `Patches.undo()`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from stepscope.tune.patch_data import LoaderPatch, install_non_blocking
from stepscope.tune.patch_model import ModelPatch, install_backends
from stepscope.tune.patch_optim import LossCapture, OptimizerPatch, ZeroGradPatch, install_grad_scaler
from stepscope.tune.patching import Patcher
from stepscope.tune.wire import Settings


class Patches:
    """The patch points of one process, observing the program (settings, losses) with or without fixes."""

    def __init__(self, step_index: Callable[[], int]) -> None:
        self.patcher = Patcher()
        self.settings = Settings()
        self.applied: Counter[str] = Counter()
        self.loader = LoaderPatch(self.settings, self.applied)
        self.model = ModelPatch(self.settings, self.applied)
        self.optimizer = OptimizerPatch(self.settings, self.applied)
        self.zero_grad = ZeroGradPatch(self.settings, self.applied)
        self.losses = LossCapture(step_index)
        self.non_blocking = False
        self.tf32 = False
        self.cudnn_benchmark = False

    def install(self, fixes: dict[str, dict[str, Any]]) -> None:
        unknown = sorted(set(fixes) - set(INSTALLERS))
        if unknown:
            raise ValueError(f"no way to apply {', '.join(unknown)} from outside the program")
        for fix_id, params in fixes.items():
            INSTALLERS[fix_id](self, params)
        for point in (self.loader, self.model, self.optimizer, self.zero_grad, self.losses):
            point.install(self.patcher)
        if self.non_blocking:
            install_non_blocking(self.patcher, self.settings, self.applied)
        install_backends(self.patcher, self.applied, tf32=self.tf32, cudnn_benchmark=self.cudnn_benchmark)
        if self.model.amp_dtype == "float16":
            install_grad_scaler(self.patcher, self.losses, _device_type())

    def undo(self) -> None:
        self.patcher.undo()


def _device_type() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _workers(p: Patches, params: dict[str, Any]) -> None:
    p.loader.num_workers = int(params.get("num_workers", 4))


def _pin_memory(p: Patches, params: dict[str, Any]) -> None:
    p.loader.pin_memory = True


def _persistent_workers(p: Patches, params: dict[str, Any]) -> None:
    p.loader.persistent_workers = True


def _larger_batch(p: Patches, params: dict[str, Any]) -> None:
    p.loader.batch_factor = int(params.get("factor", 2))


def _non_blocking(p: Patches, params: dict[str, Any]) -> None:
    p.non_blocking = True


def _set_to_none(p: Patches, params: dict[str, Any]) -> None:
    p.zero_grad.force = True


def _fused_optimizer(p: Patches, params: dict[str, Any]) -> None:
    p.optimizer.fused = str(params.get("mode", "fused"))


def _tf32(p: Patches, params: dict[str, Any]) -> None:
    p.tf32 = True


def _cudnn_benchmark(p: Patches, params: dict[str, Any]) -> None:
    p.cudnn_benchmark = True


def _amp(p: Patches, params: dict[str, Any]) -> None:
    p.model.amp_dtype = str(params.get("dtype", "bfloat16"))


def _channels_last(p: Patches, params: dict[str, Any]) -> None:
    p.model.channels_last = True


def _torch_compile(p: Patches, params: dict[str, Any]) -> None:
    if p.model.compile_mode is None:
        p.model.compile_mode = str(params.get("mode", "default"))


def _cuda_graphs(p: Patches, params: dict[str, Any]) -> None:
    p.model.compile_mode = "reduce-overhead"  # torch.compile's CUDA graphs; it includes torch_compile's fusion


INSTALLERS: dict[str, Callable[[Patches, dict[str, Any]], None]] = {
    "dataloader_workers": _workers,
    "pin_memory": _pin_memory,
    "persistent_workers": _persistent_workers,
    "larger_batch": _larger_batch,
    "non_blocking_copy": _non_blocking,
    "set_to_none": _set_to_none,
    "fused_optimizer": _fused_optimizer,
    "tf32": _tf32,
    "cudnn_benchmark": _cudnn_benchmark,
    "amp": _amp,
    "channels_last": _channels_last,
    "torch_compile": _torch_compile,
    "cuda_graphs": _cuda_graphs,
}
