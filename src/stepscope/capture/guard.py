"""Whether a hook of ours should act, known cheaply: hooks run a dozen times a step.

The process: `os.getpid()` costs ~150 ns, so the pid is kept here and renewed at each fork. Forked DataLoader
workers inherit every hook; a hook compares PID[0] with the pid its installer saw and does nothing elsewhere. A
program that forks first and installs in the child works too (PID is the child's).

torch.compile tracing: a hook must leave nothing in a graph it traces."""

from __future__ import annotations

import os
import sys

PID = [os.getpid()]
os.register_at_fork(after_in_child=lambda: PID.__setitem__(0, os.getpid()))


def compiling() -> bool:
    """torch.compile is tracing the code that called the hook (torch not imported: nothing compiles)."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.compiler.is_compiling())
