"""The host's clock with the profiler's cost taken out, event by event.

The profiler pays a callback just after each recorded timestamp: at an operator's start and end (more with input
shapes), at each allocation with memory profiling, at each CUDA runtime call (CUPTI), at each `record_function`
range. `HostCost` says what each costs on the capturing machine (measured by capture/calibrate.py). The cost
incurred at a timestamp is removed from the host time that follows it, never more than MAX_REMOVED of any
stretch, and never from a stretch in which the host waits (a sync, a batch from workers): a wait's length is
recomputed by the replay, not shrunk.

Which threads: the one that holds the steps and those that launch device work (autograd runs backward on its own
thread per device); they hand the step over to each other, so their costs add up on one path. Other threads (a
pin-memory thread) run beside it, and their costs are not on the step's path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.launches import launching_call
from stepscope.trace.model import NONE, Kind, Trace

MAX_REMOVED = 0.9  # of any stretch of host time: some work is always the program's own
STEP_RANGE_PREFIX = "ProfilerStep#"


@dataclass(frozen=True)
class HostCost:
    """The profiler's host cost per recorded event, ns."""

    op_ns: float = 0.0  # an operator (CPU op)
    alloc_ns: float = 0.0  # an allocator event (profile_memory)
    launch_ns: float = 0.0  # a CUDA runtime or driver call (CUPTI)
    range_ns: float = 0.0  # a user annotation (record_function, stepscope's line ranges, ProfilerStep)
    python_ns: float = 0.0  # a Python function event (with_stack)
    # (pid, tid, ns): more per operator on that thread, paid at its start (input shapes and a Python stack are taken
    # just after the op's start timestamp: replay/recorded.py measures it per thread on a recorded trace)
    op_extra_ns: tuple[tuple[int, int, float], ...] = ()

    @property
    def is_zero(self) -> bool:
        return not any((self.op_ns, self.alloc_ns, self.launch_ns, self.range_ns, self.python_ns,
                        *(ns for _, _, ns in self.op_extra_ns)))

    def scaled(self, k: float) -> HostCost:
        """Every event's cost times k: the same shape, another size."""
        return HostCost(op_ns=self.op_ns * k, alloc_ns=self.alloc_ns * k, launch_ns=self.launch_ns * k,
                        range_ns=self.range_ns * k, python_ns=self.python_ns * k,
                        op_extra_ns=tuple((p, t, ns * k) for p, t, ns in self.op_extra_ns))


# The profiler's cost per event for a trace recorded without a calibration (a file from elsewhere): the median of
# what capture/calibrate.py measured on this project's 13 live captures in tests/data/gpu_h100_live/*/calibration.json
# (H100 hosts, torch 2.x, shapes and memory off): op 1169 ns (481-1449), CUDA runtime call 4792 ns (982-12363),
# record_function range 14232 ns (8481-16326); allocations 0 (never profiled there). docs/patterns.md.
RECORDED_DEFAULT = HostCost(op_ns=1169.0, launch_ns=4792.0, range_ns=14232.0)


def step_threads(trace: Trace) -> frozenset[tuple[int, int]]:
    """The host threads on the step's path: the one with the step ranges (else the busiest) and the launchers. Found
    once per trace (the profiler's clock and the what-ifs that cut the host's work ask again)."""
    return trace.derived("replay.step_threads", lambda: frozenset(_step_threads(trace)))


def _step_threads(trace: Trace) -> set[tuple[int, int]]:
    ev = trace.events
    host = np.flatnonzero(ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.RUNTIME, Kind.PYTHON))
    if len(host) == 0:
        return set()
    steps = host[trace.names_where(lambda s: s.startswith(STEP_RANGE_PREFIX))[host]]
    pool = steps if len(steps) else host
    pairs, counts = np.unique(np.stack([ev.pid[pool], ev.tid[pool]]), axis=1, return_counts=True)
    main = (int(pairs[0, np.argmax(counts)]), int(pairs[1, np.argmax(counts)]))
    link = launching_call(trace)
    launchers = link[link >= 0]
    threads = {main}
    if len(launchers):
        threads |= {(int(p), int(t)) for p, t in set(zip(ev.pid[launchers].tolist(), ev.tid[launchers].tolist(),
                                                           strict=True))}
    return threads


@dataclass(frozen=True)
class HostClock:
    """Recorded host time -> host time without the profiler's cost (same origin)."""

    points: np.ndarray  # float64, sorted
    removed: np.ndarray  # the cost removed by each point, non-decreasing

    def removed_at(self, times: np.ndarray | float) -> np.ndarray:
        t = np.asarray(times, dtype=np.float64)
        if len(self.points) == 0:
            return np.zeros_like(t)
        return np.interp(t, self.points, self.removed, left=0.0, right=float(self.removed[-1]))

    def deflate(self, times: np.ndarray | float) -> np.ndarray:
        return np.asarray(times, dtype=np.float64) - self.removed_at(times)

    @property
    def total_removed(self) -> float:
        return float(self.removed[-1]) if len(self.removed) else 0.0


def host_clock(trace: Trace, cost: HostCost, waits: list[tuple[np.ndarray, np.ndarray]],
               cut: tuple[np.ndarray, np.ndarray] | None = None) -> HostClock:
    """The clock for `cost`, removing nothing inside the waits ((starts, ends) pairs of the host's waits); `cut`:
    disjoint host intervals (sorted) taken out whole, as if the host never did that work (a what-if)."""
    profiler = _profiler_clock(trace, cost, waits, cut)
    if cut is None or len(cut[0]) == 0:
        return profiler
    starts, ends = (np.asarray(x, dtype=np.float64) for x in cut)
    cum = np.concatenate([[0.0], np.cumsum(ends - starts)])
    # At each interval's start, the length cut before it; at its end, that plus its own length.
    points = np.concatenate([starts, ends, profiler.points])
    order = np.argsort(points, kind="stable")
    points = points[order]
    k = np.searchsorted(starts, points, side="right") - 1
    inside = np.clip(points - starts[np.maximum(k, 0)], 0, ends[np.maximum(k, 0)] - starts[np.maximum(k, 0)])
    removed_cut = np.where(k >= 0, cum[np.maximum(k, 0)] + inside, 0.0)
    return HostClock(points, removed_cut + profiler.removed_at(points))


def _inside(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    k = np.searchsorted(starts, times, side="right") - 1
    inside = k >= 0
    inside[inside] &= times[inside] < ends[k[inside]]
    return inside


def _profiler_clock(trace: Trace, cost: HostCost, waits: list[tuple[np.ndarray, np.ndarray]],
                    cut: tuple[np.ndarray, np.ndarray] | None) -> HostClock:
    """The profiler's cost removed; nothing inside the waits, and nothing incurred inside a cut (it goes whole)."""
    if cost.is_zero:
        return HostClock(np.zeros(0), np.zeros(0))
    times, costs = _cost_points(trace, cost)
    if cut is not None and len(cut[0]):
        keep = ~_inside(times, np.asarray(cut[0]), np.asarray(cut[1]))
        times, costs = times[keep], costs[keep]
        waits = [*waits, cut]
    if len(times) == 0:
        return HostClock(np.zeros(0), np.zeros(0))
    order = np.argsort(times, kind="stable")
    times, costs = times[order], costs[order]
    capacity = np.diff(times, prepend=times[0]) * MAX_REMOVED
    if waits:
        mid = (times + np.concatenate([[times[0]], times[:-1]])) / 2  # each stretch ends at its point
        for starts, ends in waits:
            if len(starts):
                capacity[_inside(mid, np.asarray(starts), np.asarray(ends))] = 0.0
    incurred_before = np.concatenate([[0.0], np.cumsum(costs)[:-1]])  # cost incurred at earlier points
    cum_capacity = np.cumsum(capacity)
    # removed_i = min(removed_{i-1} + capacity_i, incurred_before_i), in closed form.
    removed = cum_capacity + np.minimum.accumulate(incurred_before - cum_capacity)
    return HostClock(times, np.maximum(removed, 0.0))


def incurred_per_step(trace: Trace, cost: HostCost, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per step [start, end), the cost incurred at the points inside it: what it lengthens a host-bound step by."""
    times, costs = _cost_points(trace, cost)
    order = np.argsort(times, kind="stable")
    cum = np.concatenate([[0.0], np.cumsum(costs[order])])
    times = times[order]
    return cum[np.searchsorted(times, ends, side="left")] - cum[np.searchsorted(times, starts, side="left")]


def _cost_points(trace: Trace, cost: HostCost) -> tuple[np.ndarray, np.ndarray]:
    ev = trace.events
    threads = step_threads(trace)
    if not threads:
        return np.zeros(0), np.zeros(0)
    per_kind = {Kind.CPU_OP: cost.op_ns, Kind.USER_ANNOTATION: cost.range_ns, Kind.RUNTIME: cost.launch_ns,
                Kind.PYTHON: cost.python_ns}
    on_path = np.zeros(len(ev), dtype=bool)
    for pid, tid in threads:
        on_path |= (ev.pid == pid) & (ev.tid == tid)
    each = np.zeros(len(ev))
    for kind, ns in per_kind.items():
        each[ev.kind == kind] = ns / 2  # half at the start, half at the end
    at_start = each.copy()
    for pid, tid, ns in cost.op_extra_ns:
        at_start[(ev.kind == Kind.CPU_OP) & (ev.pid == pid) & (ev.tid == tid)] += ns
    rows = np.flatnonzero(on_path & (at_start > 0))
    times = [ev.start[rows], ev.end[rows]]
    costs = [at_start[rows], each[rows]]
    mem = trace.memory
    if cost.alloc_ns and len(mem):
        tids = {tid for _, tid in threads}
        mine = (mem.tid == NONE) | np.isin(mem.tid, list(tids))
        times.append(mem.time[mine])
        costs.append(np.full(int(mine.sum()), cost.alloc_ns))
    return np.concatenate(times).astype(np.float64), np.concatenate(costs)
