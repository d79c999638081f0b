"""The one bookkeeper of what stepscope changes in torch (and anything else) inside the user's process: every
attribute replaced is recorded with what it was, and put back in reverse order. Capture's step hooks, the step
meter's hooks, the line ranges and tune's fix points all patch through it, so the rules are one:

- owned or inherited: an attribute the owner defined itself is set back; one it inherited (a subclass's
  `__next__` from its base) is deleted again, so the base's shows through as before;
- only if still on top: when someone else wrapped over ours meanwhile (another profiler, a second capture), ours
  stays in their chain (inert: each wrapper checks its own switch) rather than pulling their wrapper out;
- undo hooks: a handle to remove (a registered hook) is undone in the same order as the patches around it.

A leaf (nothing of stepscope, no numpy): it runs in the user's process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_INHERITED = object()  # what an owner's own __dict__ held before a patch of an attribute it only inherited


@dataclass
class Patch:
    owner: Any
    name: str
    own: Any  # the owner's own value before, or _INHERITED
    replacement: Any

    def restore(self) -> bool:
        """Put the attribute back if ours is still on top; False when another wrapper is over it (left alone)."""
        on_top = (vars(self.owner).get(self.name, _INHERITED) if hasattr(self.owner, "__dict__")
                  else getattr(self.owner, self.name, _INHERITED))  # an object with __slots__ only
        if on_top is not self.replacement:
            return False
        if self.own is _INHERITED:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self.own)
        return True


class Patches:
    """Patches made, with their undo, newest last."""

    def __init__(self) -> None:
        self._undo: list[Patch | Callable[[], None]] = []

    def replace(self, owner: Any, name: str, value: Any) -> Any:
        """owner.name = value; returns what `getattr(owner, name)` gave before (inherited or its own)."""
        before = getattr(owner, name)
        own = vars(owner).get(name, _INHERITED) if hasattr(owner, "__dict__") else _INHERITED
        setattr(owner, name, value)
        self._undo.append(Patch(owner, name, own, value))
        return before

    def wrap(self, owner: Any, name: str, make: Callable[[Any], Any]) -> Any:
        """owner.name = make(what it is now); returns the replacement."""
        replacement = make(getattr(owner, name))
        self.replace(owner, name, replacement)
        return replacement

    def on_undo(self, action: Callable[[], None]) -> None:
        """Run `action` when the patches are undone, in its place among them (e.g. remove a hook's handle)."""
        self._undo.append(action)

    def restore(self, owner: Any, name: str) -> None:
        """Undo the patches of owner.name alone (newest first), before the rest: a hook removed mid-run."""
        for entry in reversed(self._undo):
            if isinstance(entry, Patch) and entry.owner is owner and entry.name == name:
                entry.restore()
        self._undo = [e for e in self._undo if not (isinstance(e, Patch) and e.owner is owner and e.name == name)]

    def undo(self) -> None:
        while self._undo:
            entry = self._undo.pop()
            if isinstance(entry, Patch):
                entry.restore()
            else:
                entry()

    def __bool__(self) -> bool:
        return bool(self._undo)

    def patched(self, owner: Any, name: str) -> bool:
        return any(isinstance(e, Patch) and e.owner is owner and e.name == name for e in self._undo)
