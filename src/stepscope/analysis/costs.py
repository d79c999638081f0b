"""Step-time attribution: every ns of a step goes to exactly one cause, from the busiest device's view.

The device is busy with compute kernels, else exposed collectives, else exposed copies. When it is idle
with work already queued, it waits on the device side (events, other streams, other ranks). When it is
idle because nothing was launched yet (host wait), the host is to blame, and what the host was doing
decides how: in the DataLoader (input), just back from a synchronisation or a synchronous copy and not yet
launching again (sync / copy_sync: at most as long as the call blocked, the head start it cost the host),
doing CPU work that launches nothing (cpu), or else issuing ops and launches (launch). The parts add up
exactly to each step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.categories import DATALOADER, is_collective_kernel
from stepscope.analysis.hostops import count_inside, host_threads, outer_cpu_ops, outermost
from stepscope.analysis.hostwork import CPU_WORK_MIN_NS, active_intervals
from stepscope.analysis.launches import launched_in_gap, launching_call
from stepscope.analysis.steps import Steps
from stepscope.analysis.syncs import is_sync_api
from stepscope.trace import intervals as iv
from stepscope.trace.model import CopyKind, HostMemory, Kind, Trace

# Blocking calls this close together on one thread block as one episode (a copy, then its stream sync).
EPISODE_GAP_NS = 50_000
# CPU_WORK_MIN_NS: a host op that runs this long without any CUDA call, or a host gap this long with no op
# at all, is CPU work (math, Python, I/O); shorter ones are the per-op cost of dispatching GPU work.

UNTRACED = "(no op: Python or untraced)"  # the cpu_ops key of host time outside any recorded op
COST_PARTS = ("compute", "communication", "copy_htod", "copy_other", "device_wait",
              "input", "copy_sync", "sync", "cpu", "launch")
# The parts in which the GPU waits for the host: there, host work the profiler inflated lengthens the step.
HOST_PARTS = ("input", "copy_sync", "sync", "cpu", "launch")


@dataclass(frozen=True)
class StepCosts:
    """Per step, ns in each part of COST_PARTS (they add up to the step), with the host-side detail."""

    device: int
    parts: dict[str, np.ndarray]
    blocking_rows: np.ndarray  # host calls that blocked: sync APIs and copies from/to pageable memory
    blocking_idle: np.ndarray  # per blocking row, the GPU idle it caused (ns)
    blocking_after_htod: np.ndarray  # per blocking row, whether it is or follows a host-to-device copy
    blocking_first: np.ndarray  # per blocking row, whether it begins its episode (count these as sync points)
    launch_ops: dict[str, int]  # outermost op name -> launch-attributed ns over all steps
    cpu_ops: dict[str, int]  # op name -> cpu-attributed ns over all steps ("(no op: Python)" for gaps)
    host_work: dict[str, np.ndarray] | None = None  # per HOST_PARTS part, per step: ns of host work inside it

    def share(self, part: str) -> float:
        total = float(sum(p.sum() for p in self.parts.values()))
        return float(self.parts[part].sum()) / total if total > 0 else 0.0


def primary_device(trace: Trace) -> int | None:
    """The device with the most kernel time (else the most GPU activity); None without any."""
    ev = trace.events
    rows = np.flatnonzero(trace.is_gpu_activity)
    if len(rows) == 0:
        return None
    weight = np.where(ev.kind[rows] == Kind.KERNEL, ev.dur[rows], 0)
    devices, inverse = np.unique(ev.device[rows], return_inverse=True)
    by_kernel = np.bincount(inverse, weights=weight)
    by_count = np.bincount(inverse)
    return int(devices[np.argmax(by_kernel) if by_kernel.max() > 0 else np.argmax(by_count)])


def step_costs(trace: Trace, steps: Steps) -> StepCosts | None:
    """Attribute each step's time; None when the trace has no GPU activity or no steps."""
    device = primary_device(trace)
    if device is None or len(steps) == 0:
        return None
    ev = trace.events
    window = (int(steps.start[0]), int(steps.end[-1]))
    on_device = trace.is_gpu_activity & (ev.device == device)
    kernel = on_device & (ev.kind == Kind.KERNEL)
    collective = kernel & trace.names_where(is_collective_kernel)
    htod = on_device & (ev.kind == Kind.MEMCPY) & (ev.copy_kind == CopyKind.HTOD)

    compute = _union(trace, kernel & ~collective)
    comm = iv.subtract(_union(trace, collective), compute)
    del collective
    taken = iv.merge(compute, comm)
    copy_htod = iv.subtract(_union(trace, htod), taken)
    taken = iv.merge(taken, copy_htod)
    copy_other = iv.subtract(_union(trace, on_device & ~kernel & ~htod), taken)
    del kernel, htod
    busy = iv.merge(taken, copy_other)
    del taken
    # Each part measured per step as soon as it is final, and let go: on a trace of gigabytes the sets are MB each.
    parts = {name: iv.coverage(part, steps.start, steps.end) for name, part in (
        ("compute", compute), ("communication", comm), ("copy_htod", copy_htod), ("copy_other", copy_other))}
    del compute, comm, copy_htod, copy_other

    # The device's activities as rows (sorted by start, as the table is): the masks over the whole table go.
    activity_rows = np.flatnonzero(on_device)
    del on_device
    host_wait, device_wait = _split_idle(trace, activity_rows, iv.complement(busy, *window))
    del busy
    parts["device_wait"] = iv.coverage(device_wait, steps.start, steps.end)
    del device_wait
    activity_starts = ev.start[activity_rows]
    del activity_rows
    dataloader = _union(trace, ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION)
                        & trace.names_where(lambda s: DATALOADER.match(s) is not None))
    input_wait = iv.intersect(host_wait, dataloader)
    not_input = left = iv.subtract(host_wait, input_wait)
    del dataloader, host_wait

    blocking, after_htod, is_copy = _blocking_calls(trace, window)
    # Unblocked, the host would have run ahead by as long as it was blocked (a copy and its sync block as
    # one episode): that much of the idle after the call, until the device's next activity, is its cost.
    episode_start = _episode_starts(trace, blocking, is_copy)
    blocked = ev.end[blocking] - episode_start
    after = np.minimum(_next_start(activity_starts, ev.end[blocking]), ev.end[blocking] + blocked)
    del activity_starts
    win_end = _window_ends(ev.start[blocking], after)
    copy_win = iv.union(ev.start[blocking[after_htod]], win_end[after_htod])
    copy_sync = iv.intersect(left, copy_win)
    left = iv.subtract(left, copy_sync)
    sync = iv.intersect(left, iv.union(ev.start[blocking], win_end))
    blocking_idle = iv.coverage(not_input, ev.start[blocking], win_end)
    left = iv.subtract(left, sync)
    del not_input, copy_win

    cpu_work, long_ops, gaps = _cpu_work(trace, window)
    cpu = iv.intersect(left, cpu_work)
    launch = iv.subtract(left, cpu)
    del left, cpu_work

    sets = {"input": input_wait, "copy_sync": copy_sync, "sync": sync, "cpu": cpu, "launch": launch}
    parts.update((name, iv.coverage(sets[name], steps.start, steps.end)) for name in HOST_PARTS)
    parts = {name: parts[name] for name in COST_PARTS}
    steps_iv = iv.union(steps.start, steps.end)
    work = active_intervals(trace, window)
    host_work = {name: iv.coverage(iv.intersect(sets[name], work), steps.start, steps.end) for name in HOST_PARTS}
    del work
    return StepCosts(
        device=device, parts=parts, blocking_rows=blocking, blocking_idle=blocking_idle,
        blocking_after_htod=after_htod, blocking_first=episode_start == ev.start[blocking],
        launch_ops=_by_op(trace, iv.intersect(launch, steps_iv), outer_cpu_ops(trace)),
        cpu_ops=_cpu_by_op(trace, iv.intersect(cpu, steps_iv), long_ops, gaps),
        host_work=host_work,
    )


def _union(trace: Trace, mask: np.ndarray) -> iv.Intervals:
    return iv.union_of(trace.events.start, trace.events.dur, mask)


def _next_start(sorted_starts: np.ndarray, times: np.ndarray) -> np.ndarray:
    """For each time, the first device activity start at or after it (the time itself when none)."""
    k = np.searchsorted(sorted_starts, times, side="left")
    found = k < len(sorted_starts)
    return np.where(found, sorted_starts[np.minimum(k, len(sorted_starts) - 1)], times)


def _episode_starts(trace: Trace, rows: np.ndarray, is_copy: np.ndarray) -> np.ndarray:
    """For each blocking call (sorted by start), where its episode began: a sync right after a blocking
    copy on the same thread continues the copy's episode."""
    ev = trace.events
    starts = ev.start[rows].copy()
    for i in range(1, len(rows)):  # blocking calls are few (a handful per step)
        same_thread = ev.pid[rows[i]] == ev.pid[rows[i - 1]] and ev.tid[rows[i]] == ev.tid[rows[i - 1]]
        close = ev.start[rows[i]] - ev.end[rows[i - 1]] <= EPISODE_GAP_NS
        if same_thread and close and is_copy[i - 1] and not is_copy[i]:
            starts[i] = starts[i - 1]
    return starts


def _window_ends(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each blocking call's window ends where the next blocking call begins, so windows never overlap."""
    if len(starts) < 2:
        return ends
    return np.maximum(np.minimum(ends, np.append(starts[1:], ends[-1])), starts)


def _split_idle(trace: Trace, activity_rows: np.ndarray, gaps: iv.Intervals) -> tuple[iv.Intervals, iv.Intervals]:
    """Host wait: the activity ending the gap was launched after the gap began (or there is none)."""
    has_next, launched_after = launched_in_gap(trace, activity_rows, gaps.starts, gaps.ends)
    host = ~has_next | launched_after
    return iv.Intervals(gaps.starts[host], gaps.ends[host]), iv.Intervals(gaps.starts[~host], gaps.ends[~host])


def _blocking_calls(trace: Trace, window: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host calls that block until the device catches up, whether each is or follows an HtoD copy, and
    whether each is a copy itself."""
    ev = trace.events
    runtime = np.flatnonzero((ev.kind == Kind.RUNTIME) & (ev.start >= window[0]) & (ev.start < window[1]))
    # Each call's launched GPU activity (the last, if several), found from the activities' side: an index over the
    # calls, not over the whole table.
    link = launching_call(trace)
    gpu = np.flatnonzero(link >= 0)
    launcher = link[gpu]
    at = np.minimum(np.searchsorted(runtime, launcher), max(len(runtime) - 1, 0))
    hit = runtime[at] == launcher if len(runtime) else np.zeros(len(gpu), dtype=bool)
    target = np.full(len(runtime), -1, dtype=np.int64)
    target[at[hit]] = gpu[hit]
    del gpu, launcher, at, hit
    has_copy = target >= 0
    launched = np.maximum(target, 0)
    copy_kind = np.where(has_copy, ev.copy_kind[launched], np.int8(CopyKind.NONE))
    is_htod = (ev.kind[launched] == Kind.MEMCPY) & has_copy & (copy_kind == CopyKind.HTOD)
    pageable_copy = (has_copy & ((copy_kind == CopyKind.HTOD) | (copy_kind == CopyKind.DTOH))
                     & (ev.host_memory[launched] == HostMemory.PAGEABLE))
    del launched, target
    sync = trace.names_where(is_sync_api)[runtime]
    blocking = sync | pageable_copy
    # "Follows an HtoD copy": the previous runtime call on the same thread launched one. Calls in thread order,
    # then time (host_threads numbers each (pid, tid); ties keep the table's order).
    threads = host_threads(trace)
    order = np.argsort(threads.shift(runtime, ev.start[runtime]), kind="stable")
    thread = threads.thread[runtime[order]]
    prev = np.zeros(len(order), dtype=bool)
    prev[1:] = (thread[1:] == thread[:-1]) & is_htod[order][:-1]
    prev_htod = np.zeros(len(runtime), dtype=bool)
    prev_htod[order] = prev
    after_htod = (is_htod | prev_htod)[blocking]
    return runtime[blocking], after_htod, pageable_copy[blocking]


def _cpu_work(trace: Trace, window: tuple[int, int]) -> tuple[iv.Intervals, np.ndarray, iv.Intervals]:
    """Long host ops that make no CUDA call, and long stretches with no host op on any thread."""
    ev = trace.events
    ops = np.flatnonzero((ev.kind == Kind.CPU_OP) & (ev.dur >= CPU_WORK_MIN_NS) & (ev.end > window[0])
                         & (ev.start < window[1]))  # the long ones first: few, so the count below is cheap
    long_ops = ops[count_inside(trace, ops, np.flatnonzero(ev.kind == Kind.RUNTIME)) == 0]
    active = ev.of_kind(Kind.CPU_OP, Kind.RUNTIME)
    gaps = iv.complement(_union(trace, active), *window)
    long_gaps = (gaps.ends - gaps.starts) >= CPU_WORK_MIN_NS
    gaps = iv.Intervals(gaps.starts[long_gaps], gaps.ends[long_gaps])
    work = iv.merge(iv.union(ev.start[long_ops], ev.end[long_ops]), gaps)
    return work, long_ops, gaps


def _by_op(trace: Trace, attributed: iv.Intervals, ops: np.ndarray) -> dict[str, int]:
    """How much of the attributed time falls inside each op, summed by op name (overlaps across threads count twice)."""
    ev = trace.events
    if len(attributed) == 0 or len(ops) == 0:
        return {}
    covered = iv.coverage(attributed, ev.start[ops], ev.end[ops])
    keep = covered > 0
    totals = np.bincount(ev.name[ops[keep]], weights=covered[keep], minlength=len(trace.strings))
    return {trace.strings[i]: int(totals[i]) for i in np.flatnonzero(totals)}


def _cpu_by_op(trace: Trace, cpu: iv.Intervals, long_ops: np.ndarray, gaps: iv.Intervals) -> dict[str, int]:
    result = _by_op(trace, cpu, outermost(trace, long_ops))
    untraced = iv.intersect(cpu, gaps).total
    if untraced:
        result[UNTRACED] = untraced
    return result
