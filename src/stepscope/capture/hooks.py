"""Step detection with no change to the program: hooks on the optimizer, the backward pass, the DataLoader
and the model.

Each hook reports a completed step to the session, which keeps the strongest source; hooks of weaker
sources are removed as soon as a stronger one leads, and all of them once the capture is over, so the
program runs at full speed afterwards. The backward hook stays while the session may need it (it counts
the backward passes of a gradient-accumulation cycle). The hooks also remember what the settings reader
needs: the model, the main DataLoader and optimizer, and the line of the user's code that built each.
Hooks do nothing in other processes (forked DataLoader workers inherit them). Where the step meter runs, the
optimizer steps and backward passes are relayed by its hooks (`install(meter)`), not hooked a second time.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable
from typing import Any

from stepscope.capture.arbiter import PRIORITY
from stepscope.capture.batch import batch_bytes_of, batch_size_of
from stepscope.capture.guard import PID, compiling
from stepscope.capture.meter import StepMeter
from stepscope.capture.model_forward import watch_forward
from stepscope.capture.session import CaptureSession
from stepscope.capture.sites import Sites
from stepscope.patches import Patches


def _has_parameters(module: Any) -> bool:
    return next(iter(module.parameters()), None) is not None


class StepHooks:
    """Installs the hooks for one session; `remove()` takes every one of them out again."""

    def __init__(self, session: CaptureSession) -> None:
        self.session = session
        self.pid = os.getpid()
        self._optimizer_handle: Any = None
        self._optimizer_pre_handle: Any = None
        self._optimizer_depth = 0  # optimizer steps running, nested (a subclass's step calling super().step())
        self._optimizer: weakref.ref | None = None
        self._optimizer_on = False
        self._dataset: weakref.ref | None = None
        self._batch_pending = False
        self._global_handles: list[Any] = []
        self._unwatch_model: Callable[[], None] | None = None  # capture/model_forward.py
        self._depth = 0
        self.model: weakref.ref | None = None
        self.sites = Sites()
        self._loaders: dict[int, weakref.ref] = {}  # id(dataset) -> the DataLoader iterating it
        self.iterators_started = 0  # new iterators of the main DataLoader (epochs with worker start-ups)
        self.batch_bytes: int | None = None  # the main DataLoader's first batch's tensors, in bytes
        self._patches = Patches()  # stepscope/patches.py: owned or inherited, restored only if still on top
        self._relay: StepMeter | None = None  # the meter whose hooks relay optimizer steps and backward passes

    # -- install / remove ------------------------------------------------------------------------------

    def install(self, meter: StepMeter | None = None) -> None:
        """`meter`: an installed step meter, whose hooks then relay the optimizer steps and backward passes."""
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        session = self.session
        if meter is not None and meter.relay_steps(session.mark, session.mark):
            self._relay = meter
        else:
            self._optimizer_pre_handle = register_optimizer_step_pre_hook(self._before_optimizer_step)
            self._optimizer_handle = register_optimizer_step_post_hook(self._on_optimizer_step)
            self._patch(torch.autograd, "backward", self._backward_wrapper)
        self._optimizer_on = True
        hooks = self

        def fetching(original: Any) -> Any:
            @functools.wraps(original)
            def __next__(iterator: Any) -> Any:  # it replaces the iterator's __next__
                hooks._before_fetch(iterator)
                batch = original(iterator)
                hooks._after_fetch(iterator, batch)
                return batch
            return __next__

        self._patch(_BaseDataLoaderIter, "__next__", fetching)
        self._patch(torch.utils.data.DataLoader, "_get_iterator", self._iterator_wrapper)
        self._patch(torch.utils.data.DataLoader, "__init__", self.sites.recorder)
        self._patch(torch.optim.Optimizer, "__init__", self.sites.recorder)
        self._global_handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(self._on_any_forward),
            torch.nn.modules.module.register_module_forward_hook(self._after_any_forward, always_call=True),
        ]

    def drop_weaker_than(self, leader: str) -> None:
        """Remove the hooks a `leader` makes useless ('' when the window is over: all of them)."""
        rank = PRIORITY.get(leader, -1)
        if rank < PRIORITY["optimizer"]:
            self._optimizer_on = False  # removed in remove(): its registry may be mid-iteration right now
            if self._relay is not None:
                self._relay.relay_steps(None, self.session.mark if leader else None)
        if rank < PRIORITY["dataloader"]:
            self._remove_dataloader()
        if rank < PRIORITY["forward"]:
            self._remove_forward()

    def remove(self) -> None:
        self._optimizer_on = False
        if self._relay is not None:
            self._relay.relay_steps(None, None)
            self._relay = None
        for handle in (self._optimizer_handle, self._optimizer_pre_handle):
            if handle is not None:
                handle.remove()
        self._optimizer_handle = self._optimizer_pre_handle = None
        self._remove_dataloader()
        self._remove_forward()
        self._patches.undo()  # someone else's wrapper over ours keeps ours, inert

    def _patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        self._patches.wrap(owner, name, make)

    @property
    def active(self) -> bool:
        return bool(self._patches) and PID[0] == self.pid

    # -- what the settings reader needs ----------------------------------------------------------------

    def main_loader(self) -> Any:
        """The DataLoader whose batches are the steps (the first to yield), if it is still alive."""
        pinned = self._dataset() if self._dataset is not None else None
        ref = self._loaders.get(id(pinned)) if pinned is not None else None
        return ref() if ref is not None else None

    def pinned_optimizer(self) -> Any:
        if self._relay is not None:
            return self._relay.pinned_optimizer()
        return self._optimizer() if self._optimizer is not None else None

    def known_model(self) -> Any:
        return self.model() if self.model is not None else None

    def _remove_dataloader(self) -> None:
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        self._patches.restore(_BaseDataLoaderIter, "__next__")

    def _remove_forward(self) -> None:
        for handle in self._global_handles:
            handle.remove()
        self._global_handles = []
        if self._unwatch_model is not None:
            self._unwatch_model()
            self._unwatch_model = None

    # -- the optimizer step ----------------------------------------------------------------------------

    # torch hooks each optimizer class's own `step` once an instance of it exists: a subclass whose step calls
    # super().step() fires the global hooks twice, nested. Only the outermost call ends a step.
    def _before_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if PID[0] == self.pid:
            self._optimizer_depth += 1

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if PID[0] != self.pid:
            return
        self._optimizer_depth = max(self._optimizer_depth - 1, 0)
        if self._optimizer_depth or not self._optimizer_on:
            return
        pinned = self._optimizer() if self._optimizer is not None else None
        if pinned is None:  # the first optimizer to step is the one counted (a GAN has two)
            self._optimizer, pinned = weakref.ref(optimizer), optimizer
        if optimizer is pinned:
            self.session.mark("optimizer")

    # -- the backward pass ------------------------------------------------------------------------------

    def _backward_wrapper(self, original: Any) -> Any:
        hooks = self

        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if hooks.active and not compiling():
                hooks.session.mark("backward")  # a backward pass just ended (a step, or one micro-batch)
            return result

        return backward

    # -- the DataLoader iteration ----------------------------------------------------------------------

    def _iterator_wrapper(self, original: Any) -> Any:
        hooks = self

        @functools.wraps(original)
        def _get_iterator(loader: Any) -> Any:  # a new iterator: a new epoch, workers started again
            if hooks.active:
                try:
                    hooks._loaders[id(loader.dataset)] = weakref.ref(loader)
                    main = hooks._dataset() if hooks._dataset is not None else None
                    if main is None or loader.dataset is main:
                        hooks.iterators_started += 1
                except TypeError:
                    pass
            return original(loader)

        return _get_iterator

    def _before_fetch(self, iterator: Any) -> None:
        # A fetch that follows a yielded batch ends that batch's step (not the first fetch of an epoch).
        if self._batch_pending and PID[0] == self.pid and self._is_main_loader(iterator._dataset):
            self._batch_pending = False
            self.session.mark("dataloader")

    def _after_fetch(self, iterator: Any, batch: Any) -> None:
        if PID[0] != self.pid or not self._is_main_loader(iterator._dataset):
            return
        if not self._batch_pending and self.session.batch_size_source in (None, "model input"):
            self.session.set_batch_size(batch_size_of(batch), "dataloader")
        if self.batch_bytes is None:
            self.batch_bytes = batch_bytes_of(batch) or None
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
        if self._depth == 0 and PID[0] == self.pid and _has_parameters(module):
            self._remove_forward()  # the global hooks slow every module call; watch the model alone
            self._unwatch_model = watch_forward(module, self._on_model_forward, _nothing)
            self.model = weakref.ref(module)
            self.session.set_batch_size(batch_size_of(args), "model input")
            return
        self._depth += 1

    def _after_any_forward(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(self._depth - 1, 0)

    def _on_model_forward(self) -> None:
        if PID[0] == self.pid:
            self.session.mark("forward")  # a call after the first ends the previous forward's step


def _nothing() -> None:
    pass
