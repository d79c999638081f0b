"""PyTorch Lightning: `Trainer(callbacks=[StepscopeCallback()])` profiles a window of training steps.

A step runs from one `on_train_batch_end` to the next, so it holds the fetch of its batch, the forward,
the backward and the optimizer step. After training, `callback.report` is the Report (also printed).
"""

from __future__ import annotations

from typing import Any

from stepscope.api import Profile
from stepscope.capture.batch import batch_size_of
from stepscope.integrations._common import CallbackOptions, as_loader, finish
from stepscope.model import report as s

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback  # type: ignore[no-redef]


class StepscopeCallback(Callback):
    def __init__(self, **options: Any) -> None:
        """Options: those of stepscope.profile() (skip, warmup, steps, batch_size, out, force, ...) and stop,
        print_report (see stepscope.integrations._common.CallbackOptions)."""
        super().__init__()
        self.options = CallbackOptions.from_kwargs(**options)
        self.report: s.Report | None = None
        self._profile: Profile | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self._profile is not None and self._profile.result is None:
            self._profile.stop()  # a previous fit() that failed before its end hook: let go of its profiler
        self._profile = self.options.profile("lightning", trainer.global_rank, trainer.world_size)
        optimizers = getattr(trainer, "optimizers", None) or [None]
        self._profile.observe(model=pl_module, optimizer=optimizers[0],
                              loader=as_loader(getattr(trainer, "train_dataloader", None)))
        self._profile.start()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._profile is not None and self.options.capture.batch_size is None and batch_idx == 0:
            self._profile.set_batch_size(batch_size_of(batch), "trainer")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._profile is None:
            return
        self._profile.step()
        if self.options.stop and self._profile.done:
            trainer.should_stop = True

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish(trainer)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._finish(trainer)  # keep what was recorded before the failure

    def _finish(self, trainer: Any) -> None:
        if self._profile is not None and self._profile.result is None:
            self.report = finish(self._profile, self.options, show=trainer.is_global_zero)
