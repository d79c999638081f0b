"""Hugging Face Transformers: `Trainer(..., callbacks=[StepscopeCallback()])` profiles a window of steps.

The Trainer fetches each batch before `on_step_begin`, so a step here runs from one `on_step_end` to the
next: the fetch, the forward and backward passes (all of a gradient-accumulation cycle) and the optimizer
step. Samples per step: per-device batch size x gradient-accumulation steps, unless told otherwise.
After training, `callback.report` is the Report (also printed).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from stepscope.api import Profile
from stepscope.integrations._common import CallbackOptions, as_loader, finish
from stepscope.model import report as s


class StepscopeCallback(TrainerCallback):
    def __init__(self, **options: Any) -> None:
        """Options: those of stepscope.profile() (skip, warmup, steps, batch_size, out, force, ...) and stop,
        print_report (see stepscope.integrations._common.CallbackOptions)."""
        self.options = CallbackOptions.from_kwargs(**options)
        self.report: s.Report | None = None
        self._profile: Profile | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._profile is not None and self._profile.result is None:
            self._profile.stop()  # a previous fit() that failed before its end hook: let go of its profiler
        self._profile = self.options.profile("huggingface", args.process_index, args.world_size)
        self._profile.observe(model=kwargs.get("model"), optimizer=kwargs.get("optimizer"),
                              loader=as_loader(kwargs.get("train_dataloader")))
        self._profile.start()
        self._profile.set_batch_size(args.per_device_train_batch_size * args.gradient_accumulation_steps, "trainer")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._profile is None:
            return
        self._profile.step()
        if self.options.stop and self._profile.done:
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._profile is not None and self._profile.result is None:
            self.report = finish(self._profile, self.options, show=state.is_world_process_zero)
