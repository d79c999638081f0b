"""Line ranges: every torch call made from user code runs inside a `stepscope.line|file|line|...` range.

A TorchFunctionMode sees each call at the torch API boundary, before dispatch, so the frame that made
the call is on the Python stack; the first user frame up from there is the line to blame. A few entry
points that are not torch functions get the same range around them for their caller: the DataLoader's
`__next__`, the optimizers' `step` and `zero_grad` (whose own torch calls then get no ranges: the whole
call is charged to the caller), `autograd.Function.apply` (so a custom Function is one op at the line
that applied it, forward and backward alike) and a torch.compile'd module's call. Inside a capture the
DataLoader's `__next__` is the instrumentation layer's (capture/meter/hooks.py): the range runs inside its
fetch (`fetch`, its `around_fetch` slot) rather than in a second patch of it; only `stepscope.attribution`
used alone, with no capture in the process, patches `__next__` itself.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from torch import _C
from torch._C._profiler import _RecordFunctionFast
from torch.compiler import is_compiling as _compiling
from torch.overrides import TorchFunctionMode

from stepscope.attribution.usercode import UserCode
from stepscope.patches import Patches

# The instrumentation layer's fetch slot: given `around(original, iterator)` it runs each DataLoader fetch through
# it and says True (False: no layer is installed); given None it runs them plainly again.
FetchSlot = Callable[[Callable[[Any, Any], Any] | None], bool]

# Tensor methods that read metadata and dispatch no op: no range for them, it would only cost time.
_NO_OP_METHODS = frozenset({
    "__get__", "__set__", "__delete__", "dim", "ndimension", "size", "numel", "nelement", "stride",
    "storage_offset", "is_contiguous", "data_ptr", "element_size", "get_device", "is_floating_point",
    "is_complex", "__len__", "__hash__",
})


def _issues_no_op(func: Any) -> bool:
    return getattr(func, "__name__", "") in _NO_OP_METHODS


class LineMode(TorchFunctionMode):
    """Wraps each torch call from user code in a line range; inactive, it only passes calls through."""

    def __init__(self, user: UserCode) -> None:
        super().__init__()
        self.user = user
        self.active = True
        self.thread = threading.get_ident()  # the thread whose mode stack holds it
        self._skip: dict[Any, bool] = {}

    def on_top(self) -> bool:
        """Whether this thread's mode stack has this mode on top (so it can be taken off and put back)."""
        if not self.active or self.thread != threading.get_ident():
            return False
        depth = _C._len_torch_function_stack()
        return depth > 0 and _C._get_function_stack_at(depth - 1) is self

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if kwargs is None:
            kwargs = {}
        if not self.active or _compiling():
            return func(*args, **kwargs)
        try:
            skip = self._skip.get(func)
            if skip is None:
                skip = self._skip[func] = _issues_no_op(func)
            name = None if skip else self.user.annotation(sys._getframe(1))
        except Exception:  # attribution must never break the user's call
            name = None
        if name is None:
            return func(*args, **kwargs)
        with _RecordFunctionFast(name):
            return func(*args, **kwargs)


class _PatchState:
    """Shared by the wrappers of one install: whether they are armed, and the mode to quiet inside them."""

    def __init__(self) -> None:
        self.active = False
        self.mode: LineMode | None = None


def _ranged(original: Callable, args: tuple, kwargs: dict, user: UserCode, state: _PatchState, quiet: bool,
            caller: Any) -> Any:
    """`original(*args, **kwargs)` inside a line range for the user's frame from `caller` outwards while the state
    is armed; with `quiet`, the torch calls inside it get no ranges of their own (the whole call is charged to the
    caller's line anyway)."""
    if not state.active or _compiling():
        return original(*args, **kwargs)
    try:
        name = user.annotation(caller)
    except Exception:
        name = None
    if name is None:
        return original(*args, **kwargs)
    mode = state.mode if quiet else None
    if mode is None or not mode.on_top():
        with _RecordFunctionFast(name):
            return original(*args, **kwargs)
    args, kwargs = _with_closure_attributed(args, kwargs, mode)
    _C._pop_torch_function_stack()  # out of the way entirely: not even a pass-through per call
    try:
        with _RecordFunctionFast(name):
            return original(*args, **kwargs)
    finally:
        if mode.active:  # not stopped meanwhile (capture may stop at a DataLoader or optimizer step)
            _C._push_on_torch_function_stack(mode)


def _call_site_wrapper(original: Callable, user: UserCode, state: _PatchState, quiet: bool) -> Callable:
    """`original` inside a line range for its caller (`_ranged`)."""

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return _ranged(original, args, kwargs, user, state, quiet, sys._getframe(1))

    wrapper.__stepscope_wrapper__ = True  # type: ignore[attr-defined]
    return wrapper


def _fetch_around(user: UserCode, state: _PatchState) -> Callable[[Any, Any], Any]:
    """What the instrumentation layer's fetch runs in its place: the fetch inside a range for its caller (the C
    fetch has no frame of its own, so the caller's is this function's caller's; the Python one's is stepscope's
    and skipped as not the user's)."""

    def around(original: Any, iterator: Any) -> Any:
        return _ranged(original, (iterator,), {}, user, state, True, sys._getframe(1))

    return around


def _with_closure_attributed(args: tuple, kwargs: dict, mode: LineMode) -> tuple[tuple, dict]:
    """`optimizer.step(closure)`: the closure runs the forward and backward passes (every Lightning loop does
    this), so inside it the mode is back on and each torch call gets its own line, as in a plain loop."""
    closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
    if not callable(closure):
        return args, kwargs

    @functools.wraps(closure)
    def attributed(*c_args: Any, **c_kwargs: Any) -> Any:
        if not mode.active:
            return closure(*c_args, **c_kwargs)
        _C._push_on_torch_function_stack(mode)
        try:
            return closure(*c_args, **c_kwargs)
        finally:
            if mode.on_top():
                _C._pop_torch_function_stack()

    if "closure" in kwargs:
        return args, {**kwargs, "closure": attributed}
    return (args[0], attributed, *args[2:]), kwargs


def _subclasses(cls: type) -> list[type]:
    found, todo = [], list(cls.__subclasses__())
    while todo:
        sub = todo.pop()
        found.append(sub)
        todo.extend(sub.__subclasses__())
    return found


def _targets(*, fetch: bool) -> list[tuple[type, str, bool]]:
    """(owner, attribute, quiet inside): a custom Function's forward keeps the lines of its own ops. `fetch`: the
    DataLoader's `__next__` too (no instrumentation layer runs its fetch)."""
    import torch
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    targets = [(torch.optim.Optimizer, "zero_grad", True), (torch.autograd.Function, "apply", False)]
    if fetch:
        targets.append((_BaseDataLoaderIter, "__next__", True))
    # Each optimizer class's own step (torch wraps it in its profiling wrapper once per class).
    targets += [(cls, "step", True) for cls in _subclasses(torch.optim.Optimizer) if "step" in cls.__dict__]
    dynamo = sys.modules.get("torch._dynamo.eval_frame")
    if dynamo is not None and hasattr(dynamo, "OptimizedModule"):  # a torch.compile'd module: one call
        targets.append((dynamo.OptimizedModule, "__call__", False))
    return targets


class CallSitePatches:
    """Line ranges around the entry points that torch functions do not see; removed without a trace."""

    def __init__(self, user: UserCode, fetch: FetchSlot | None = None) -> None:
        """`fetch`: the instrumentation layer's fetch slot (`around` in, or None out; False: no layer installed)."""
        self.user = user
        self._state = _PatchState()
        self._installed = Patches()  # stepscope/patches.py: owned or inherited, restored only if still on top
        self._fetch = fetch
        self._in_fetch = False

    def install(self, mode: LineMode | None = None) -> None:
        self._state.active, self._state.mode = True, mode
        self._in_fetch = self._fetch is not None and self._fetch(_fetch_around(self.user, self._state))
        for owner, attribute, quiet in _targets(fetch=not self._in_fetch):
            original = owner.__dict__.get(attribute, getattr(owner, attribute, None))
            if original is None:
                continue
            if isinstance(original, classmethod):
                replacement: Any = classmethod(_call_site_wrapper(original.__func__, self.user, self._state, quiet))
            else:
                replacement = _call_site_wrapper(original, self.user, self._state, quiet)
            self._installed.replace(owner, attribute, replacement)

    def remove(self) -> None:
        # A wrapper someone else put over ours keeps ours in its chain: inactive, it only passes through.
        self._state.active, self._state.mode = False, None
        if self._in_fetch and self._fetch is not None:
            self._fetch(None)
            self._in_fetch = False
        self._installed.undo()


class LineSurvey(TorchFunctionMode):
    """Counts the torch calls each user line makes (a few steps before the window); records nothing."""

    def __init__(self, user: UserCode) -> None:
        super().__init__()
        self.user = user
        self.active = True
        self.counts: Counter[tuple[str, int]] = Counter()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if self.active and not _compiling():
            try:
                frame = self.user.user_frame(sys._getframe(1))
                if frame is not None:
                    self.counts[(frame.f_code.co_filename, frame.f_lineno)] += 1
            except Exception:  # never break the user's call
                pass
        return func(*args, **(kwargs or {}))


# Modes stopped while torch ran their own handler: torch takes a mode off its stack for the handler and puts it
# back afterwards, so it cannot come off then. They come off at the next sweep (a start, a stop, the session's end).
_STRANDED: list[TorchFunctionMode] = []


def take_off(mode: TorchFunctionMode) -> bool:
    """Take `mode` off this thread's mode stack wherever it sits (modes pushed above it go back in their order),
    or leave it for `sweep` when it is not there now. A mode left there, even disarmed, would still see every
    torch call after the run and send each through the Python functions other tools patched a second time."""
    if _pop(mode):
        return True
    if mode not in _STRANDED:
        _STRANDED.append(mode)
    return False


def sweep() -> None:
    """Take off the stranded modes now back on this thread's stack."""
    for mode in list(_STRANDED):
        if _pop(mode):
            _STRANDED.remove(mode)


def forget_stranded() -> None:
    """At the session's end: a mode still stranded is on another thread's stack, disarmed; stop looking for it."""
    sweep()
    _STRANDED.clear()


def _pop(mode: TorchFunctionMode) -> bool:
    depth = _C._len_torch_function_stack()
    at = next((i for i in range(depth - 1, -1, -1) if _C._get_function_stack_at(i) is mode), None)
    if at is None:
        return False
    above = [_C._pop_torch_function_stack() for _ in range(depth - 1 - at)]
    _C._pop_torch_function_stack()
    for other in reversed(above):
        _C._push_on_torch_function_stack(other)
    return True
