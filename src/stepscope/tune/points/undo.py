"""Reversible patches (stepscope/patches.py): every attribute replaced or hook added is recorded, and `undo()`
puts it all back; and where the user's own code is."""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
from pathlib import Path

from stepscope.patches import Patches

# Tune's fix points patch through the one bookkeeper every hook uses (owned or inherited, restored only if still
# on top); `Patcher` is its name here.
Patcher = Patches


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
