"""Reversible patches: every attribute replaced or hook added is recorded, and `undo()` puts it all back."""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

_MISSING = object()


class Patcher:
    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def replace(self, owner: Any, name: str, value: Any) -> Any:
        """Set owner.name = value; returns what `getattr(owner, name)` gave before (possibly inherited)."""
        before = getattr(owner, name)
        own = vars(owner).get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING

        def restore() -> None:
            if own is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, own)

        setattr(owner, name, value)
        self._undo.append(restore)
        return before

    def on_undo(self, action: Callable[[], None]) -> None:
        """Run `action` when the patches are undone (e.g. remove a hook handle)."""
        self._undo.append(action)

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    """Folders of library code: the standard library, installed packages, torch and stepscope themselves."""
    import torch

    paths = sysconfig.get_paths()
    roots = {paths.get("stdlib"), paths.get("purelib"), paths.get("platlib"),
             os.path.dirname(torch.__file__), str(Path(__file__).resolve().parents[2])}  # stepscope/
    return tuple(os.path.realpath(r) + os.sep for r in roots if r)


def user_site(skip: int = 2) -> tuple[str | None, int | None]:
    """The file and line of the first caller outside library code (the user's call)."""
    frame = sys._getframe(skip)
    while frame is not None:
        name = frame.f_code.co_filename
        if not is_library(name):
            return os.path.abspath(name), frame.f_lineno
        frame = frame.f_back
    return None, None


@functools.lru_cache(maxsize=512)
def is_library(filename: str) -> bool:
    return filename.startswith("<") or os.path.realpath(filename).startswith(_library_roots())
