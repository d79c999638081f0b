"""Step detection with no change to the program: hooks on the optimizer, the DataLoader and the model.

Each hook reports a completed step to the session, which keeps the strongest source; hooks of weaker
sources are removed as soon as a stronger one leads, and all of them once the window is recorded, so
the program runs at full speed outside the window. Hooks do nothing in other processes (forked
DataLoader workers inherit them).
"""

from __future__ import annotations

import functools
import os
import weakref
from typing import Any

from stepscope.capture.arbiter import PRIORITY
from stepscope.capture.batch import batch_size_of
from stepscope.capture.session import CaptureSession


def _has_parameters(module: Any) -> bool:
    return next(iter(module.parameters()), None) is not None


class StepHooks:
    """Installs the hooks for one session; `remove()` takes every one of them out again."""

    def __init__(self, session: CaptureSession) -> None:
        self.session = session
        self.pid = os.getpid()
        self._optimizer_handle: Any = None
        self._optimizer: weakref.ref | None = None
        self._optimizer_on = False
        self._dataloader_next: Any = None  # the original _BaseDataLoaderIter.__next__
        self._dataset: weakref.ref | None = None
        self._batch_pending = False
        self._global_handles: list[Any] = []
        self._model_handle: Any = None
        self._depth = 0

    # -- install / remove ------------------------------------------------------------------------------

    def install(self) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        self._optimizer_handle = register_optimizer_step_post_hook(self._on_optimizer_step)
        self._optimizer_on = True
        original = _BaseDataLoaderIter.__next__
        self._dataloader_next = original
        hooks = self

        @functools.wraps(original)
        def __next__(iterator: Any) -> Any:  # it replaces the iterator's __next__
            hooks._before_fetch(iterator)
            batch = original(iterator)
            hooks._after_fetch(iterator, batch)
            return batch

        _BaseDataLoaderIter.__next__ = __next__  # type: ignore[method-assign]
        self._global_handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(self._on_any_forward),
            torch.nn.modules.module.register_module_forward_hook(self._after_any_forward, always_call=True),
        ]

    def drop_weaker_than(self, leader: str) -> None:
        """Remove the hooks a `leader` makes useless ('' when the window is over: all of them)."""
        rank = PRIORITY.get(leader, -1)
        if rank < PRIORITY["optimizer"]:
            self._optimizer_on = False  # removed in remove(): its registry may be mid-iteration right now
        if rank < PRIORITY["dataloader"]:
            self._remove_dataloader()
        if rank < PRIORITY["forward"]:
            self._remove_forward()

    def remove(self) -> None:
        self._optimizer_on = False
        if self._optimizer_handle is not None:
            self._optimizer_handle.remove()
            self._optimizer_handle = None
        self._remove_dataloader()
        self._remove_forward()

    def _remove_dataloader(self) -> None:
        if self._dataloader_next is None:
            return
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        if getattr(_BaseDataLoaderIter.__next__, "__wrapped__", None) is self._dataloader_next:
            _BaseDataLoaderIter.__next__ = self._dataloader_next  # type: ignore[method-assign]
        self._dataloader_next = None

    def _remove_forward(self) -> None:
        for handle in self._global_handles:
            handle.remove()
        self._global_handles = []
        if self._model_handle is not None:
            self._model_handle.remove()
            self._model_handle = None

    # -- the optimizer step ----------------------------------------------------------------------------

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self._optimizer_on or os.getpid() != self.pid:
            return
        pinned = self._optimizer() if self._optimizer is not None else None
        if pinned is None:  # the first optimizer to step is the one counted (a GAN has two)
            self._optimizer, pinned = weakref.ref(optimizer), optimizer
        if optimizer is pinned:
            self.session.mark("optimizer")

    # -- the DataLoader iteration ----------------------------------------------------------------------

    def _before_fetch(self, iterator: Any) -> None:
        # A fetch that follows a yielded batch ends that batch's step (not the first fetch of an epoch).
        if self._batch_pending and os.getpid() == self.pid and self._is_main_loader(iterator._dataset):
            self._batch_pending = False
            self.session.mark("dataloader")

    def _after_fetch(self, iterator: Any, batch: Any) -> None:
        if os.getpid() != self.pid or not self._is_main_loader(iterator._dataset):
            return
        if not self._batch_pending and self.session.batch_size_source in (None, "model input"):
            self.session.set_batch_size(batch_size_of(batch), "dataloader")
        self._batch_pending = True

    def _is_main_loader(self, dataset: Any) -> bool:
        """The first dataset to yield is the one whose batches are steps (not a validation set's), until
        it is gone: a loop that makes a new loader every epoch moves on to the next one."""
        pinned = self._dataset() if self._dataset is not None else None
        if pinned is None:
            try:
                self._dataset = weakref.ref(dataset)
            except TypeError:  # no weak references to it: keep it alive instead
                self._dataset = lambda d=dataset: d  # type: ignore[assignment]
            return True
        return dataset is pinned

    # -- the model's forward ---------------------------------------------------------------------------

    def _on_any_forward(self, module: Any, args: Any) -> None:
        # Only until the model is known: the first module with parameters called outside any other's forward.
        if self._depth == 0 and os.getpid() == self.pid and _has_parameters(module):
            self._remove_forward()  # the global hooks slow every module call; keep one hook on the model
            self._model_handle = module.register_forward_pre_hook(self._on_model_forward)
            self.session.set_batch_size(batch_size_of(args), "model input")
            return
        self._depth += 1

    def _after_any_forward(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(self._depth - 1, 0)

    def _on_model_forward(self, module: Any, args: Any) -> None:
        if os.getpid() == self.pid:
            self.session.mark("forward")  # a call after the first ends the previous forward's step
