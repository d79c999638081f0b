"""Whether a hook of ours should act, known cheaply: hooks run a dozen times a step.

The process: `os.getpid()` costs ~150 ns, so the pid is kept here and renewed at each fork. Forked DataLoader
workers inherit every hook; a hook compares PID[0] with the pid its installer saw and does nothing elsewhere. A
program that forks first and installs in the child works too (PID is the child's).

torch.compile tracing: a hook must leave nothing in a graph it traces."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

PID = [os.getpid()]
os.register_at_fork(after_in_child=lambda: PID.__setitem__(0, os.getpid()))


def compiling() -> bool:
    """torch.compile is tracing the code that called the hook (torch not imported: nothing compiles)."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.compiler.is_compiling())


class _NeverFlag:
    _is_compiling_flag = False


def tracing_checks() -> tuple[Callable[[], bool], Any]:
    """For a hook run on every step, the cheapest way to know torch.compile or torch.export is tracing it:
    `folded() or flags._is_compiling_flag`. torch.compile folds `is_dynamo_compiling()` to True while it traces (run
    natively it returns False: one frame, 16 ns, against `is_compiling`'s two, 47 ns); torch.export, which runs the
    code natively, sets the flag. A torch without them: `is_compiling`, and a flag that stays False. Called once,
    at install, with torch imported."""
    compiler = sys.modules["torch"].compiler
    folded = getattr(compiler, "is_dynamo_compiling", None)
    if folded is None or not hasattr(compiler, "_is_compiling_flag"):
        return compiler.is_compiling, _NeverFlag
    return folded, compiler
