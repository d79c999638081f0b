"""The meter's hooks on torch: the DataLoader's `__next__` (waiting for data), the model's top-level forward, the
backward pass, the optimizer step, and, where a device is in use, the calls that block on it (`item()`, `tolist()`,
`cpu()`, `torch.cuda.synchronize()`). They stay for the whole program, unlike the step-detection hooks, and do
nothing on other threads, in forked DataLoader workers, or while torch.compile traces.

The model is the first module with parameters called outside any other module's forward; global module hooks
find it and are then replaced by two hooks on the model alone (global hooks slow every module call)."""

from __future__ import annotations

import functools
import sys
import weakref
from typing import Any, Protocol

from stepscope.capture.meter.phases import BACKWARD, DATA, FORWARD, OPTIMIZER, SYNC, PhaseClock

SYNC_METHODS = ("item", "tolist", "cpu")


class Meter(Protocol):
    """What the hooks report to (capture/meter/meter.py's StepMeter)."""

    clock: PhaseClock
    num_workers: int | None

    def here(self) -> bool: ...
    def boundary(self, source: str) -> None: ...


def _compiling() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.compiler.is_compiling())


class MeterHooks:
    def __init__(self, meter: Meter, *, syncs: bool) -> None:
        self.meter = meter
        self.syncs = syncs
        self._patches: list[tuple[Any, str, Any, Any, bool]] = []  # owner, name, original, replacement, owned
        self._handles: list[Any] = []
        self._discovery: list[Any] = []
        self._depth = 0
        self._optimizer: Any = None  # the first optimizer to step marks the steps (a GAN has two)
        self._optimizer_depth = 0
        self._dataset: Any = None  # the first dataset to yield marks the steps (not a validation set's)
        self._batch_pending = False
        self.model_found = False

    # -- install / remove ------------------------------------------------------------------------------

    def install(self) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        self._patch(_BaseDataLoaderIter, "__next__", self._next_wrapper)
        self._patch(torch.autograd, "backward", self._backward_wrapper)
        self._handles += [register_optimizer_step_pre_hook(self._before_optimizer),
                          register_optimizer_step_post_hook(self._after_optimizer)]
        self._discovery = [
            torch.nn.modules.module.register_module_forward_pre_hook(self._on_any_forward),
            torch.nn.modules.module.register_module_forward_hook(self._after_any_forward, always_call=True),
        ]
        if self.syncs:
            for name in SYNC_METHODS:
                self._patch(torch.Tensor, name, self._sync_wrapper)
            if torch.cuda.is_available():
                self._patch(torch.cuda, "synchronize", self._sync_wrapper)

    def remove(self) -> None:
        for handle in (*self._handles, *self._discovery):
            handle.remove()
        self._handles, self._discovery = [], []
        for owner, name, original, replacement, owned in reversed(self._patches):
            if owner.__dict__.get(name) is replacement:  # someone else's wrapper over ours keeps ours, inert
                if owned:
                    setattr(owner, name, original)
                else:
                    delattr(owner, name)  # the method was inherited (Tensor.item from TensorBase)
        self._patches = []

    def _patch(self, owner: Any, name: str, make: Any) -> None:
        owned = name in owner.__dict__
        original = getattr(owner, name)
        replacement = make(original)
        setattr(owner, name, replacement)
        self._patches.append((owner, name, original, replacement, owned))

    # -- wrappers --------------------------------------------------------------------------------------

    def _next_wrapper(self, original: Any) -> Any:
        hooks, meter, clock = self, self.meter, self.meter.clock

        @functools.wraps(original)
        def __next__(iterator: Any) -> Any:
            if not meter.here():
                return original(iterator)
            main = hooks._is_main(iterator)
            if main and hooks._batch_pending:  # a fetch after a yielded batch ends that batch's step
                hooks._batch_pending = False
                meter.boundary("dataloader")
            clock.enter(DATA)
            try:
                batch = original(iterator)
            finally:
                clock.leave(DATA)
            if main:
                hooks._batch_pending = True
            return batch

        return __next__

    def _is_main(self, iterator: Any) -> bool:
        dataset = getattr(iterator, "_dataset", None)
        if self._dataset is None or self._dataset() is None:
            try:
                self._dataset = weakref.ref(dataset)
            except TypeError:
                self._dataset = lambda d=dataset: d
            self.meter.num_workers = getattr(iterator, "_num_workers", None)
            return True
        return dataset is self._dataset()

    def _backward_wrapper(self, original: Any) -> Any:
        return self._timed(original, BACKWARD, ends="backward")

    # torch hooks each optimizer class's own `step`: a subclass whose step calls super().step() fires the global hooks
    # twice, nested. Only the outermost call is the optimizer step.
    def _before_optimizer(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.meter.here():
            self._optimizer_depth += 1
            if self._optimizer_depth == 1:
                self.meter.clock.enter(OPTIMIZER)

    def _after_optimizer(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.meter.here():
            return
        self._optimizer_depth = max(self._optimizer_depth - 1, 0)
        if self._optimizer_depth:
            return
        self.meter.clock.leave(OPTIMIZER)
        pinned = self._optimizer() if self._optimizer is not None else None
        if pinned is None:
            self._optimizer, pinned = weakref.ref(optimizer), optimizer
        if optimizer is pinned:
            self.meter.boundary("optimizer")

    def _sync_wrapper(self, original: Any) -> Any:
        return self._timed(original, SYNC)

    def _timed(self, original: Any, phase: int, ends: str | None = None) -> Any:
        """`original` charged to `phase` on the training thread (not while torch.compile traces it); a step of
        source `ends` ends when it returns."""
        meter, clock = self.meter, self.meter.clock

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not meter.here() or _compiling():
                return original(*args, **kwargs)
            clock.enter(phase)
            try:
                return original(*args, **kwargs)
            finally:
                clock.leave(phase)
                if ends is not None:
                    meter.boundary(ends)

        return timed

    # -- the model's forward -----------------------------------------------------------------------------

    def _on_any_forward(self, module: Any, args: Any) -> None:
        if self.model_found or not self.meter.here():
            return
        if self._depth == 0 and next(iter(module.parameters()), None) is not None:
            self.model_found = True
            for handle in self._discovery:
                handle.remove()
            self._discovery = []
            self._handles += [module.register_forward_pre_hook(self._before_model),
                              module.register_forward_hook(self._after_model, always_call=True)]
            self._before_model(module, args)  # this call's own pre-hook was collected before ours existed
            return
        self._depth += 1

    def _after_any_forward(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(self._depth - 1, 0)

    def _before_model(self, module: Any, args: Any) -> None:
        if self.meter.here():
            self.meter.boundary("forward")  # a call of the model ends the previous forward's step
            self.meter.clock.enter(FORWARD)

    def _after_model(self, module: Any, args: Any, output: Any) -> None:
        if self.meter.here():
            self.meter.clock.leave(FORWARD)

