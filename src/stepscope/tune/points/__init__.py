"""The patch points of one trial's process: where the fixes hook into torch (the DataLoader, batch copies, the
model, the optimizer, zero_grad, backend flags, a training framework's configuration) and what they observe of the
program (its settings, its losses).

A fix's `install` (tune/fixes/) sets its part on these points; `install()` then puts every point in place, and
`undo()` takes everything out again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from stepscope.tune.points.copy import CopyPatch
from stepscope.tune.points.framework import FrameworkPatch
from stepscope.tune.points.loader import LoaderPatch
from stepscope.tune.points.model import ModelPatch, install_backends
from stepscope.tune.points.optim import LossCapture, OptimizerPatch, ZeroGradPatch, install_grad_scaler
from stepscope.tune.points.uint8 import Uint8Batches
from stepscope.tune.points.undo import Patcher
from stepscope.tune.wire import Settings


class Points:
    """The patch points of one process, observing the program (settings, losses) with or without fixes."""

    def __init__(self, step_index: Callable[[], int]) -> None:
        self.patcher = Patcher()
        self.settings = Settings()
        self.applied: Counter[str] = Counter()
        self.uint8 = Uint8Batches()
        self.loader = LoaderPatch(self.settings, self.applied, self.uint8)
        self.copy = CopyPatch(self.settings, self.applied, self.uint8)
        self.model = ModelPatch(self.settings, self.applied, self.uint8)
        self.optimizer = OptimizerPatch(self.settings, self.applied)
        self.zero_grad = ZeroGradPatch(self.settings, self.applied)
        self.framework = FrameworkPatch(self.settings, self.applied)
        self.losses = LossCapture(step_index)
        self.tf32 = False
        self.cudnn_benchmark = False

    def install(self) -> None:
        """Every point in place, with what the fixes set on them."""
        for point in (self.framework, self.loader, self.copy, self.model, self.optimizer, self.zero_grad,
                      self.losses):
            point.install(self.patcher)
        install_backends(self.patcher, self.applied, tf32=self.tf32, cudnn_benchmark=self.cudnn_benchmark)
        if self.model.amp_dtype == "float16":
            install_grad_scaler(self.patcher, self.losses, _device_type())

    def undo(self) -> None:
        self.patcher.undo()


def _device_type() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
