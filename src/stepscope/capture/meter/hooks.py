"""The instrumentation layer: the one set of hooks on torch's measuring-side patch points, the DataLoader's
`__next__` (waiting for data), the model's top-level forward, the backward pass, the optimizer step, and, where a
device is in use, the calls that block on it (`item()`, `tolist()`, `cpu()`, `torch.cuda.synchronize()`). They
append one event stream the step meter replays, stay for the whole program and measure nothing on other threads, in
forked DataLoader workers, or while torch.compile traces.

Others subscribe instead of patching them again (`subscribe`): the step detection (capture/hooks.py) hears of the
steps each source ends, the main loader's batches and the model; the window's line ranges run in the fetch's place.

The model is the first module with parameters called outside any other module's forward; global module hooks
find it and are then replaced by a watch on the model's calls (global hooks slow every module call; a hook on the
model itself would break `torch.save(model)`: capture/model_forward.py)."""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any, Protocol

from stepscope.capture.guard import PID, tracing_checks
from stepscope.capture.meter import phases
from stepscope.capture.meter.device import DeviceTimer
from stepscope.capture.meter.native import native_hooks
from stepscope.capture.meter.phases import BACKWARD, DATA, FORWARD, OPTIMIZER, SYNC, PhaseClock
from stepscope.capture.model_forward import watch_forward
from stepscope.patches import Patches

ENTER, LEAVE, MARK, SHIFT = phases.ENTER, phases.LEAVE, phases.MARK, phases.SHIFT

SYNC_METHODS = ("item", "tolist", "cpu")
# The step sources the hooks mark, in the order of their event codes (MARK + index).
HOOKED = ("dataloader", "forward", "backward", "optimizer")
MARK_DATALOADER, MARK_FORWARD, MARK_BACKWARD, MARK_OPTIMIZER = (MARK + i for i in range(len(HOOKED)))
# Who may subscribe to the layer (MeterHooks.subscribe), each a slot of the hooks' state: relay_* get the source's
# name at each step it ends (relay_batch: each batch of the main loader), on_model (model, its first call's args),
# around_fetch(original, iterator) runs each fetch in its place (the window's line ranges).
SUBSCRIBERS = ("relay_optimizer", "relay_backward", "relay_dataloader", "relay_batch", "relay_forward", "on_model",
               "around_fetch")


class Meter(Protocol):
    """What the hooks report to (capture/meter/meter.py's StepMeter); its due times, muted sources and device it
    keeps in the hooks' state itself."""

    clock: PhaseClock
    num_workers: int | None
    thread: int  # the training thread's id
    pid: int  # the process that installed the meter (capture/guard.py)
    state: Any  # the hooks' state (HookState or _native.State): the one both hook sets read and write

    def here(self) -> bool: ...
    def catch_up(self) -> None: ...


# The hooks below run on every step, a dozen times, with cold caches (a 1 ms step has 10 µs for all of them: 1%):
# each reads the meter's thread and clock from its closure, appends an event (`time << SHIFT | code`: one C call) and
# leaves the bookkeeping to the replay (capture/meter/phases.py, bulk.py), about once a second. The tail that marks a
# step and replays when due is written out in each hook, not shared: a call is exactly what it would cost.
# The data fetch, the backward pass, the optimizer's hooks and the forward's entry and exit run in C where it was built
# (`_native.c`, native.py): the same events, from the same state; the model class's wrapper and the syncs stay Python
# (torch.compile traces them).


class HookState:
    """What the hooks read and write, the meter's part included: the Python hooks' state; the C hooks' is
    `_native.State`, with the same fields. Written in one place (no copy from one to the other)."""

    __slots__ = ("batch_pending", "dataset", "device", "due", "mark_due", "muted", "optimizer", "optimizer_depth",
                 "other_depth", *SUBSCRIBERS)

    def __init__(self) -> None:
        self.due = 0  # an event at or after it replays the events (about once a second)
        self.mark_due = 0  # a mark at or after it does (every mark while the steps settle, or with a device)
        self.muted = 0  # a bit per source of HOOKED whose boundaries are not kept (an event per hook saved)
        self.device: DeviceTimer | None = None  # marks the phases on the device, once the program has used CUDA
        self.batch_pending = False  # the main loader yielded a batch whose step has not ended
        self.dataset: Any = None  # the first dataset to yield marks the steps (not a validation set's): a weakref
        self.optimizer: Any = None  # the first optimizer to step marks the steps (a GAN has two): a weakref
        self.optimizer_depth = 0  # optimizer steps running on the training thread, nested
        self.other_depth = 0  # optimizer steps running on other threads, nested
        for name in SUBSCRIBERS:
            setattr(self, name, None)


MUTED_DATALOADER, MUTED_FORWARD, MUTED_BACKWARD, MUTED_OPTIMIZER = (1 << i for i in range(len(HOOKED)))


class MeterHooks:
    def __init__(self, meter: Meter, *, syncs: bool) -> None:
        self.meter = meter
        self.syncs = syncs
        self._patches = Patches()  # stepscope/patches.py: owned or inherited, restored only if still on top
        self._handles: list[Any] = []
        self._discovery: list[Any] = []
        self._unwatch: Any = None  # stops watching the model's calls (capture/model_forward.py)
        self._depth = 0
        self.native: Any = None  # the C hooks' module, when they run
        self.model_found = False
        self.model: Any = None  # a weakref to the model, once found
        # The subscribers are slots of the state (`subscribe`; a second layer of hooks cost ~13 µs a step). A loop on
        # another thread is not measured, but its optimizer steps, backward passes and model calls are relayed.

    @property
    def state(self) -> Any:
        return self.meter.state

    # -- install / remove ------------------------------------------------------------------------------

    def install(self) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        native = native_hooks(self.meter.clock.clock)
        if native is not None:  # the C state takes the Python one's place, its fields as they are so far
            state = native.State(self.meter.clock.events, self.meter.catch_up, self._pin, self._other_thread_step,
                                 *tracing_checks())
            for name in HookState.__slots__:
                setattr(state, name, getattr(self.meter.state, name))
            state.pid, state.thread, self.native, self.meter.state = self.meter.pid, self.meter.thread, native, state
            # Each given the wrapped function's name, doc and __wrapped__, as functools.wraps gives the Python ones.
            self._patch(_BaseDataLoaderIter, "__next__", lambda original: functools.update_wrapper(
                native.data_next(state, original, DATA), original))
            self._patch(torch.autograd, "backward", lambda original: functools.update_wrapper(native.timed(
                state, original, BACKWARD, source=MARK_BACKWARD - MARK, marks_device=True, relays=True), original))
            before, after = native.optimizer_hooks(state)
        else:
            self._patch(_BaseDataLoaderIter, "__next__", self._next_wrapper)
            self._patch(torch.autograd, "backward", self._backward_wrapper)
            before, after = self._optimizer_hooks()
        self._handles += [register_optimizer_step_pre_hook(before), register_optimizer_step_post_hook(after)]
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
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        self._patches.undo()  # an inherited method (Tensor.item from TensorBase) is deleted again

    def subscribe(self, **callbacks: Any) -> None:
        """Set (or, with None, clear) subscribers by name (SUBSCRIBERS), in the state both hook sets read."""
        state = self.state
        for name, callback in callbacks.items():
            if name not in SUBSCRIBERS:
                raise TypeError(f"no subscriber {name!r} in the instrumentation layer")
            setattr(state, name, callback)

    def _patch(self, owner: Any, name: str, make: Any) -> None:
        self._patches.wrap(owner, name, make)

    # -- wrappers --------------------------------------------------------------------------------------

    def _next_wrapper(self, original: Any) -> Any:
        hooks, meter, thread, pid, get_ident = self, self.meter, self.meter.thread, self.meter.pid, threading.get_ident
        clock, push, state = self.meter.clock.clock, self.meter.clock.push, self.state

        @functools.wraps(original)
        def __next__(iterator: Any) -> Any:
            if PID[0] != pid or get_ident() != thread:
                return original(iterator)
            dataset = getattr(iterator, "_dataset", None)  # the main loader's, pinned on its first batch: inline
            pinned = state.dataset() if state.dataset is not None else None
            main = dataset is pinned if pinned is not None else hooks._pin(iterator, dataset)
            t = clock()
            if main and state.batch_pending:  # a fetch after a yielded batch ends that batch's step
                state.batch_pending = False
                if not state.muted & MUTED_DATALOADER:
                    push(t << SHIFT | MARK_DATALOADER)
                    if t >= state.mark_due:
                        meter.catch_up()
                relay = state.relay_dataloader
                if relay is not None:
                    relay("dataloader")
            push(t << SHIFT | (ENTER + DATA))
            try:
                around = state.around_fetch
                batch = original(iterator) if around is None else around(original, iterator)
            finally:
                t = clock()
                push(t << SHIFT | (LEAVE + DATA))
                if t >= state.due:
                    meter.catch_up()
            if main:
                state.batch_pending = True
                if state.relay_batch is not None:
                    state.relay_batch(batch)
            return batch

        return __next__

    def _pin(self, iterator: Any, dataset: Any) -> bool:
        """The first dataset to yield is the main one (not a validation set): its batches are steps."""
        try:
            self.state.dataset = weakref.ref(dataset)
        except TypeError:
            self.state.dataset = lambda d=dataset: d
        self.meter.num_workers = getattr(iterator, "_num_workers", None)
        return True

    def _backward_wrapper(self, original: Any) -> Any:
        """The backward pass charged to BACKWARD; a backward step ends when it returns (and is relayed)."""
        meter, thread, pid, get_ident = self.meter, self.meter.thread, self.meter.pid, threading.get_ident
        clock, push, state = self.meter.clock.clock, self.meter.clock.push, self.state
        folded, flags = tracing_checks()
        enters, leaves = ENTER + BACKWARD, LEAVE + BACKWARD

        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            if PID[0] != pid or folded() or flags._is_compiling_flag:
                return original(*args, **kwargs)
            if get_ident() != thread:
                result = original(*args, **kwargs)
                if state.relay_backward is not None:
                    state.relay_backward("backward")
                return result
            push(clock() << SHIFT | enters)
            if state.device is not None:
                state.device.mark(BACKWARD)
            try:
                result = original(*args, **kwargs)
            except BaseException:
                push(clock() << SHIFT | leaves)  # a backward pass that raised ends no step
                raise
            t = clock()
            push(t << SHIFT | leaves)
            if not state.muted & MUTED_BACKWARD:
                push(t << SHIFT | MARK_BACKWARD)
                if t >= state.mark_due:
                    meter.catch_up()
            elif t >= state.due:
                meter.catch_up()
            relay = state.relay_backward
            if relay is not None:
                relay("backward")
            return result

        return backward

    # torch hooks each optimizer class's own `step`: a subclass whose step calls super().step() fires the global hooks
    # twice, nested. Only the outermost call is the optimizer step.
    def _optimizer_hooks(self) -> tuple[Any, Any]:
        hooks, meter, thread, pid, get_ident = self, self.meter, self.meter.thread, self.meter.pid, threading.get_ident
        clock, push, state = self.meter.clock.clock, self.meter.clock.push, self.state

        def before(optimizer: Any, args: Any, kwargs: Any) -> None:
            if PID[0] != pid:
                return
            if get_ident() != thread:
                state.other_depth += 1
                return
            state.optimizer_depth += 1
            if state.optimizer_depth == 1:
                push(clock() << SHIFT | (ENTER + OPTIMIZER))
                if state.device is not None:
                    state.device.mark(OPTIMIZER)

        def after(optimizer: Any, args: Any, kwargs: Any) -> None:
            if PID[0] != pid:
                return
            if get_ident() != thread:
                hooks._other_thread_step(optimizer)
                return
            state.optimizer_depth = depth = max(state.optimizer_depth - 1, 0)
            if depth:
                return
            t = clock()
            push(t << SHIFT | (LEAVE + OPTIMIZER))
            pinned = state.optimizer() if state.optimizer is not None else None
            if pinned is None:
                state.optimizer, pinned = weakref.ref(optimizer), optimizer
            if optimizer is not pinned:
                return
            if not state.muted & MUTED_OPTIMIZER:
                push(t << SHIFT | MARK_OPTIMIZER)
                if t >= state.mark_due:
                    meter.catch_up()
            elif t >= state.due:
                meter.catch_up()
            relay = state.relay_optimizer
            if relay is not None:
                relay("optimizer")

        return before, after

    def _other_thread_step(self, optimizer: Any) -> None:
        """An optimizer step on another thread: not measured; relayed when it is the outermost call of the pinned
        optimizer (the first to step, on any thread)."""
        state = self.state
        state.other_depth = max(state.other_depth - 1, 0)
        if state.other_depth or state.relay_optimizer is None:
            return
        pinned = state.optimizer() if state.optimizer is not None else None
        if pinned is None:
            state.optimizer, pinned = weakref.ref(optimizer), optimizer
        if optimizer is pinned:
            state.relay_optimizer("optimizer")

    def pinned_optimizer(self) -> Any:
        return self.state.optimizer() if self.state.optimizer is not None else None

    def _sync_wrapper(self, original: Any) -> Any:
        """`original` (a call that blocks on the device) charged to SYNC on the training thread (not while
        torch.compile traces it)."""
        meter, thread, pid, get_ident = self.meter, self.meter.thread, self.meter.pid, threading.get_ident
        clock, push, state = self.meter.clock.clock, self.meter.clock.push, self.state
        folded, flags = tracing_checks()
        enters, leaves = ENTER + SYNC, LEAVE + SYNC

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if PID[0] != pid or get_ident() != thread or folded() or flags._is_compiling_flag:
                return original(*args, **kwargs)
            push(clock() << SHIFT | enters)
            try:
                return original(*args, **kwargs)
            finally:
                t = clock()
                push(t << SHIFT | leaves)
                if t >= state.due:
                    meter.catch_up()

        return timed

    # -- the model's forward -----------------------------------------------------------------------------

    def _on_any_forward(self, module: Any, args: Any) -> None:
        if self.model_found or not self.meter.here():
            return
        if self._depth == 0 and next(iter(module.parameters()), None) is not None:
            self.model_found = True
            self.model = weakref.ref(module)
            for handle in self._discovery:
                handle.remove()
            self._discovery = []
            if self.state.on_model is not None:
                self.state.on_model(module, args)
            before, after = self.native.forward_hooks(self.state) if self.native is not None else self._model_hooks()
            self._unwatch = watch_forward(module, before, after)
            before(True)  # the first call: its forward was looked up before the watch existed, its end from a hook
            handle: Any = None

            def first_call_ended(module: Any, args: Any, output: Any) -> None:
                handle.remove()
                after()

            handle = module.register_forward_hook(first_call_ended, always_call=True)
            return
        self._depth += 1

    def _after_any_forward(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(self._depth - 1, 0)

    def known_model(self) -> Any:
        return self.model() if self.model is not None else None

    def _model_hooks(self) -> tuple[Any, Any]:
        meter, thread, pid, get_ident = self.meter, self.meter.thread, self.meter.pid, threading.get_ident
        clock, push, state = self.meter.clock.clock, self.meter.clock.push, self.state

        def before(first: bool = False) -> None:
            if PID[0] != pid:
                return
            relay = state.relay_forward
            if relay is not None and not first:  # the step detection counts the calls after the first
                relay("forward")
            if get_ident() != thread:
                return
            t = clock()
            if not state.muted & MUTED_FORWARD:
                push(t << SHIFT | MARK_FORWARD)  # a call of the model ends the previous forward's step
                if t >= state.mark_due:
                    meter.catch_up()
            push(t << SHIFT | (ENTER + FORWARD))
            if state.device is not None:
                state.device.mark(FORWARD)

        def after() -> None:
            if PID[0] == pid and get_ident() == thread:
                t = clock()
                push(t << SHIFT | (LEAVE + FORWARD))
                if t >= state.due:
                    meter.catch_up()

        return before, after
