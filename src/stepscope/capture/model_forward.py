"""The calls of one model instance, seen without putting anything on the model.

A hook registered on the model lives in its `__dict__`: `torch.save(model)` then tries to pickle it and fails (a
local function), and `copy.deepcopy(model)` (an EMA copy) carries it, so the copy's calls would count as the model's.
Instead, the model's class gets its `forward` wrapped once, and the wrapper acts only for the watched instance;
every other instance of the class passes straight through. A class whose `forward` cannot be wrapped (not a plain
function, or one the instance overrides) falls back to hooks on the instance.

The wrapper costs one Python frame per call of the class (torch's path for a module with hooks costs about that
plus a frame per hook), and nothing is left in a graph torch.compile traces."""

from __future__ import annotations

import functools
import types
import weakref
from collections.abc import Callable
from typing import Any

from stepscope.capture.guard import tracing_checks

Listener = Callable[[], None]


class _Watch:
    __slots__ = ("after", "before", "target")

    def __init__(self, model: Any, before: Listener, after: Listener) -> None:
        self.target = weakref.ref(model)
        self.before, self.after = before, after


class _ClassPatch:
    """`cls.forward` wrapped; the watches of its instances."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.owned = "forward" in cls.__dict__
        self.original = cls.forward
        self.watches: list[_Watch] = []
        self.only: _Watch | None = None  # the one watch, when there is exactly one
        self.wrapper = self._wrap(self.original)
        cls.forward = self.wrapper  # type: ignore[attr-defined]

    def _wrap(self, original: Any) -> Any:
        patch, (folded, flags) = self, tracing_checks()

        # Every call of the class runs this: no call beyond the watches' own (a 1 ms step has 10 µs for all hooks).
        # One watch (the usual case) is read without a loop or a list.
        @functools.wraps(original)
        def forward(module: Any, *args: Any, **kwargs: Any) -> Any:
            if folded() or flags._is_compiling_flag:  # first: torch.compile folds it and traces nothing of ours
                return original(module, *args, **kwargs)
            only = patch.only
            if only is not None:
                if only.target() is not module:  # another instance of the class (a nested block, an EMA copy)
                    return original(module, *args, **kwargs)
                only.before()
                try:
                    return original(module, *args, **kwargs)
                finally:
                    only.after()
            mine = [watch for watch in patch.watches if watch.target() is module]
            if not mine:
                return original(module, *args, **kwargs)
            for watch in mine:
                watch.before()
            try:
                return original(module, *args, **kwargs)
            finally:
                for watch in reversed(mine):
                    watch.after()

        return forward

    def restore(self) -> bool:
        """Put the class back, unless someone wrapped it after us (ours then stays, inert): True when restored."""
        if self.cls.__dict__.get("forward") is not self.wrapper:
            return False
        if self.owned:
            self.cls.forward = self.original  # type: ignore[attr-defined]
        else:
            delattr(self.cls, "forward")  # it was inherited
        return True


_PATCHES: dict[type, _ClassPatch] = {}


def watch_forward(model: Any, before: Listener, after: Listener) -> Callable[[], None]:
    """Call `before` when a call of `model` enters its forward and `after` when it leaves (also on an exception);
    returns the function that stops watching."""
    cls = type(model)
    if "forward" in getattr(model, "__dict__", {}) or not isinstance(cls.__dict__.get("forward", cls.forward),
                                                                     types.FunctionType):
        return _instance_hooks(model, before, after)
    patch = _PATCHES.get(cls)
    if patch is None:
        patch = _PATCHES[cls] = _ClassPatch(cls)
    watch = _Watch(model, before, after)
    patch.watches = [*patch.watches, watch]  # a new list: a call in progress keeps iterating the old one
    patch.only = watch if len(patch.watches) == 1 else None

    def stop() -> None:
        if watch not in patch.watches:
            return
        patch.watches = [w for w in patch.watches if w is not watch]
        patch.only = patch.watches[0] if len(patch.watches) == 1 else None
        if not patch.watches and patch.restore() and _PATCHES.get(cls) is patch:
            del _PATCHES[cls]

    return stop


def _instance_hooks(model: Any, before: Listener, after: Listener) -> Callable[[], None]:
    handles = [model.register_forward_pre_hook(lambda module, args: before()),
               model.register_forward_hook(lambda module, args, output: after(), always_call=True)]

    def stop() -> None:
        for handle in handles:
            handle.remove()

    return stop
