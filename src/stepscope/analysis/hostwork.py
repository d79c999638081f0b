"""Host work: the host time the profiler's own per-op cost falls on, per step; and the parts of a CPU step.

The profiler (and stepscope's line ranges) add a fixed cost to every recorded op and runtime call: to
its own span and to the short stretch of dispatch glue between two calls. They add nothing to a wait (a
synchronisation, the DataLoader's queue of worker batches, a collective), to a sleep or a read from
storage, to Python or numpy work between ops, or to GPU time. So host work is the union, over host
threads, of op and runtime-call spans and the gaps shorter than CPU_WORK_MIN_NS between them, less the
blocking calls and collective ops.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from stepscope.analysis.breakdown import Breakdown
from stepscope.analysis.categories import COLLECTIVE_OP, DATALOADER
from stepscope.analysis.hostops import inside_any, self_time
from stepscope.analysis.steps import PROFILER_STEP, Steps
from stepscope.analysis.syncs import is_sync_api
from stepscope.trace import intervals as iv
from stepscope.trace.model import Kind, Trace

# A host gap this long with no op in it is Python, numpy, I/O or a sleep, which the profiler leaves alone;
# a shorter one is the dispatch glue between two calls, where part of the profiler's per-op cost lands.
CPU_WORK_MIN_NS = 100_000


@dataclass(frozen=True)
class HostWork:
    """Per step, ns of host work (in all) and the part of it inside DataLoader ranges."""

    active: np.ndarray
    in_dataloader: np.ndarray


def active_intervals(trace: Trace, window: tuple[int, int]) -> iv.Intervals:
    """Host work within `window` (ns), as disjoint intervals."""
    ev = trace.events
    # Ranges that only wrap other work (a DataLoader fetch, a step) are no op, whatever category they carry.
    wrapper = trace.names_where(lambda s: DATALOADER.match(s) is not None or PROFILER_STEP.match(s) is not None)
    host = (ev.device < 0) & ev.of_kind(Kind.CPU_OP, Kind.RUNTIME) & ~wrapper
    calls = iv.union_of(ev.start, ev.dur, host)
    gaps = iv.complement(calls, *window)
    short = (gaps.ends - gaps.starts) < CPU_WORK_MIN_NS
    work = iv.merge(calls, iv.Intervals(gaps.starts[short], gaps.ends[short]))
    waits = host & trace.names_where(lambda s: is_sync_api(s) or COLLECTIVE_OP.match(s) is not None)
    work = iv.subtract(work, iv.union(ev.start[waits], ev.end[waits]))
    return iv.clip(work, *window)


def host_work(trace: Trace, steps: Steps) -> HostWork:
    """Host work per step, and the part of it spent inside the DataLoader."""
    if len(steps) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return HostWork(empty, empty)
    ev = trace.events
    work = active_intervals(trace, (int(steps.start[0]), int(steps.end[-1])))
    loader = ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION) & trace.names_where(
        lambda s: DATALOADER.match(s) is not None)
    in_loader = iv.intersect(work, iv.union(ev.start[loader], ev.end[loader]))
    return HostWork(iv.coverage(work, steps.start, steps.end), iv.coverage(in_loader, steps.start, steps.end))


# -- the parts of a CPU-only step -----------------------------------------------------------------------

# An op shorter than this is mostly dispatch cost (argument parsing, dispatcher, allocation), not math.
TINY_OP_NS = 20_000
CPU_PARTS = ("dataloader", "communication", "cpu_compute", "python")


def cpu_parts(trace: Trace, steps: Steps, breakdown: Breakdown) -> dict[str, np.ndarray]:
    """Per step, ns of a CPU-only step in: the DataLoader, collectives, real compute in ops (the self time of
    ops doing at least TINY_OP_NS of their own work), and the rest (Python, dispatch, tiny ops). They add up
    to the step."""
    def column(name: str) -> np.ndarray:
        return breakdown.per_step[:, breakdown.categories.index(name)].astype(np.float64)

    loader, comm = column("dataloader"), column("communication")
    room = np.maximum(steps.duration - loader - comm, 0)
    compute = np.minimum(_substantial_op_time(trace, steps), room)
    return {"dataloader": loader, "communication": comm, "cpu_compute": compute, "python": room - compute}


def cpu_host_work(parts: dict[str, np.ndarray], work: HostWork) -> dict[str, np.ndarray]:
    """The host work inside each CPU part: the DataLoader's, all of the compute, and the rest's ops and glue."""
    rest = np.maximum(work.active - work.in_dataloader - parts["cpu_compute"], 0)
    return {"dataloader": work.in_dataloader.astype(np.float64), "communication": np.zeros(len(rest)),
            "cpu_compute": parts["cpu_compute"], "python": np.minimum(rest, parts["python"])}


def _substantial_op_time(trace: Trace, steps: Steps) -> np.ndarray:
    """Per step, the self time of ops whose own work (less the ops inside them) is at least TINY_OP_NS,
    outside the DataLoader and collectives: aten::addmm's math counts, aten::linear around it does not."""
    ev = trace.events
    excluded = ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION) & trace.names_where(
        lambda s: DATALOADER.match(s) is not None or COLLECTIVE_OP.match(s) is not None)
    ops = np.flatnonzero(ev.kind == Kind.CPU_OP)
    own = self_time(trace, ops)
    keep = (own >= TINY_OP_NS) & ~excluded[ops] & ~inside_any(trace, np.flatnonzero(excluded), ops)
    return steps.per_step(ev.start[ops[keep]], own[keep].astype(np.float64)).astype(np.float64)


def op_self_time(trace: Trace, steps: Steps, pattern: re.Pattern[str]) -> float:
    """Mean ns per step of the self time of the CPU ops whose name matches `pattern` (e.g. convolutions)."""
    ev = trace.events
    ops = np.flatnonzero(ev.kind == Kind.CPU_OP)
    if len(ops) == 0 or len(steps) == 0:
        return 0.0
    match = trace.names_where(lambda s: pattern.match(s) is not None)[ops]
    own = self_time(trace, ops[match]).astype(np.float64)
    return float(steps.per_step(ev.start[ops[match]], own).sum()) / len(steps)
