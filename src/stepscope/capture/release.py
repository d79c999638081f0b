"""Free a stopped torch profiler's recorded results now, not whenever the garbage collector gets to them.

`torch.profiler.profile` holds bound methods of itself (its action map), so a stopped profiler is freed only by a
garbage collection, at any later moment: during the next profiler session too, where freeing the old session's
native results (libkineto's MemoryTraceLogger, with memory or shapes recorded) crashed the process (SIGSEGV in
~MemoryTraceLogger under `gdb`, reproduced with a low GC threshold and two sessions in one run). Dropping the
results as soon as a session has stopped and exported destroys them between sessions, where it is safe.
"""

from __future__ import annotations

from typing import Any


def release_results(prof: Any) -> None:
    """Drop `prof`'s native results (a stopped `torch.profiler.profile` or its autograd profiler); never raises."""
    try:
        inner = getattr(prof, "profiler", None)
        for holder in (inner, prof):
            if holder is not None and getattr(holder, "kineto_results", None) is not None:
                holder.kineto_results = None
        if inner is not None:
            prof.profiler = None
    except Exception:  # a torch without these attributes: leave it to the collector, as before
        pass
