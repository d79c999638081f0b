"""Checks every reader makes on what it read: values no profiler produces, and records plainly missing."""

from __future__ import annotations

import numpy as np

from stepscope.trace.model import Events, Kind

# No profiler capture spans more than days: a time further than this from the others is corrupt.
MAX_SPAN_NS = 10**15  # 11.6 days


def launches_without_kernels(events: Events, strings: tuple[str, ...]) -> str | None:
    """A note when the host launched kernels but no kernel was recorded: the GPU side is missing, not idle."""
    if events.of_kind(Kind.KERNEL).any():
        return None
    runtime = events.name[events.kind == Kind.RUNTIME]
    if not len(runtime):
        return None
    names, counts = np.unique(runtime, return_counts=True)
    launches = sum(int(c) for n, c in zip(names.tolist(), counts.tolist(), strict=True)
                   if "LaunchKernel" in strings[n][:64])
    if not launches:
        return None
    return (f"{launches} kernel launches but no kernel was recorded: the GPU side of this trace is missing "
            "(not idle), so GPU figures are unknown")
