"""Replay a trace's timeline with new GPU durations: the host keeps its measured timeline, each stream runs its
work in launch order, and the calls that block the host (syncs, copies from pageable memory) end when the GPU
work they waited for ends in the new timeline, moving everything the host does after them.

Every activity's measured start is explained by what it waited for: the previous activity on its stream (plus a
small queue gap), its launch (plus the launch latency), or an activity on another stream that ended just before
it; what none of them explains is kept as a fixed delay. With the measured durations the replay reproduces the
measured timeline exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from stepscope.analysis.launches import launching_call
from stepscope.analysis.syncs import is_sync_api
from stepscope.trace.model import CopyKind, DeviceInfo, Events, HostMemory, Kind, Trace

QUEUE_GAP_NS = 2_000  # a gap up to this long between queued work on a stream is the stream's own overhead
IDLE_STREAM_NS = 5_000  # a stream idle this long before an activity was waiting for its launch
DEFAULT_LAUNCH_LATENCY_NS = 5_000  # launch call start to activity start, when no activity shows it
MAX_LAUNCH_LATENCY_NS = 50_000  # an activity that starts later than this after its launch on an idle stream waited
DEPENDENCY_WINDOW_NS = 5_000  # an unexplained wait ending within this of another stream's activity waited on it
SYNC_TOLERANCE_NS = 10_000  # a stream whose work ended this much after a sync returned was not waited for
_DROPPED_KINDS = (Kind.GPU_ANNOTATION, Kind.GPU_SYNC)  # projections of host ranges; no analysis reads them


@dataclass(frozen=True)
class _Ops:
    """The device's activities in row order with what the replay needs of each."""

    start: np.ndarray
    end: np.ndarray  # measured
    stream: np.ndarray
    launch: np.ndarray  # host time of the launch call's start (unlinked: start minus the launch latency)
    latency: np.ndarray  # launch to start, at most the typical latency
    prev: np.ndarray  # index of the previous activity on the same stream, -1 for the first
    gap: np.ndarray  # queue gap kept after the previous activity
    dep: np.ndarray  # index of an activity on another stream this one waited for, -1 for none
    delay: np.ndarray  # what nothing explains
    order: np.ndarray  # processing order (launch order, kept per stream)
    key: np.ndarray  # the host time at which each is processed


def _streams(start: np.ndarray, end: np.ndarray, stream: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((np.arange(len(start)), stream))
    prev = np.full(len(start), -1, dtype=np.int64)
    same = stream[order][1:] == stream[order][:-1]
    prev[order[1:][same]] = order[:-1][same]
    queue = np.where(prev >= 0, start - end[np.maximum(prev, 0)], np.iinfo(np.int64).max)
    return prev, queue


def _dependencies(start: np.ndarray, end: np.ndarray, stream: np.ndarray, waiting: np.ndarray) -> np.ndarray:
    """For activities with an unexplained wait, the latest-ending activity on another stream just before."""
    dep = np.full(len(start), -1, dtype=np.int64)
    by_end = np.argsort(end, kind="stable")
    ends = end[by_end]
    for i in np.flatnonzero(waiting):
        k = int(np.searchsorted(ends, start[i], side="right")) - 1
        while k >= 0 and ends[k] >= start[i] - DEPENDENCY_WINDOW_NS:
            j = by_end[k]
            if stream[j] != stream[i]:
                dep[i] = j
                break
            k -= 1
    return dep


def _ops(trace: Trace, rows: np.ndarray) -> _Ops:
    ev = trace.events
    start, end, stream = ev.start[rows], ev.end[rows], ev.stream[rows]
    link = launching_call(trace)[rows]
    linked = link >= 0
    call = np.where(linked, ev.start[np.maximum(link, 0)], start)
    prev, queue = _streams(start, end, stream)
    to_start = start - call
    # The launch latency, from activities that found their stream idle and started soon after their launch (an
    # idle stream can also be waiting on another stream; those start long after their launch).
    waited_for_launch = linked & (queue > IDLE_STREAM_NS) & (to_start < MAX_LAUNCH_LATENCY_NS)
    typical = int(np.median(to_start[waited_for_launch])) if waited_for_launch.any() else DEFAULT_LAUNCH_LATENCY_NS
    latency = np.where(linked, np.minimum(to_start, typical), typical)
    launch = np.where(linked, call, start - typical)
    gap = np.minimum(queue, QUEUE_GAP_NS)
    prev_end = np.where(prev >= 0, end[np.maximum(prev, 0)] + gap, np.iinfo(np.int64).min)
    explained = np.maximum(prev_end, launch + latency)
    dep = _dependencies(start, end, stream, start - explained > QUEUE_GAP_NS)
    explained = np.where(dep >= 0, np.maximum(explained, end[np.maximum(dep, 0)]), explained)
    key = launch.copy()
    for s in np.unique(stream):  # per stream, launch order is execution order
        members = np.flatnonzero(stream == s)
        key[members] = np.maximum.accumulate(key[members])
    order = np.lexsort((np.arange(len(rows)), key))
    return _Ops(start=start, end=end, stream=stream, launch=launch, latency=latency, prev=prev, gap=gap, dep=dep,
                delay=start - explained, order=order, key=key)


def blocking_calls(trace: Trace) -> np.ndarray:
    """Host calls that return only when the device has caught up: sync APIs and copies from or to pageable
    memory (the copy is staged through a host buffer), sorted by start."""
    ev = trace.events
    runtime = np.flatnonzero(ev.kind == Kind.RUNTIME)
    sync = trace.names_where(is_sync_api)[runtime]
    link = launching_call(trace)
    copies = np.flatnonzero((link >= 0) & (ev.kind == Kind.MEMCPY) & (ev.host_memory == HostMemory.PAGEABLE)
                            & np.isin(ev.copy_kind, [CopyKind.HTOD, CopyKind.DTOH]))
    blocking = np.union1d(runtime[sync], link[copies])
    return blocking[np.argsort(ev.start[blocking], kind="stable")]


@dataclass
class _State:
    host_speed: float
    shift: float = 0.0  # how much later (ns) the host runs from here on than it did
    ends: list[int] = field(default_factory=list)  # blocking calls' measured ends, in processing order
    shifts: list[float] = field(default_factory=list)  # the shift after each

    def host(self, t: float) -> float:
        return t / self.host_speed + self.shift


def _simulate(ops: _Ops, dur: np.ndarray, calls_start: np.ndarray, calls_end: np.ndarray,
              host_speed: float) -> tuple[np.ndarray, _State]:
    """New starts of the activities; the host's shift after each blocking call."""
    n = len(ops.start)
    state = _State(host_speed=host_speed)
    new_start = np.zeros(n, dtype=np.float64)
    new_end = np.zeros(n, dtype=np.float64)
    done = np.zeros(n, dtype=bool)
    last: dict[int, int] = {}  # stream -> its last processed activity
    c = 0
    for i in ops.order.tolist():
        while c < len(calls_start) and calls_start[c] < ops.key[i]:
            _block(state, int(calls_start[c]), int(calls_end[c]), last, ops.end, new_end)
            c += 1
        at = state.host(ops.launch[i]) + ops.latency[i]
        p = ops.prev[i]
        if p >= 0:
            at = max(at, new_end[p] + ops.gap[i])
        d = ops.dep[i]
        if d >= 0:  # not replayed yet (launched later than this one): its measured end stands in
            at = max(at, new_end[d] if done[d] else ops.end[d])
        new_start[i] = at + ops.delay[i]
        new_end[i] = new_start[i] + dur[i]
        done[i] = True
        last[int(ops.stream[i])] = i
    while c < len(calls_start):
        _block(state, int(calls_start[c]), int(calls_end[c]), last, ops.end, new_end)
        c += 1
    return new_start, state


def _block(state: _State, s: int, e: int, last: dict[int, int], measured_end: np.ndarray,
           new_end: np.ndarray) -> None:
    """A blocking call: it ends when the work it waited for ends in the new timeline (plus the time it took
    after that work, as measured), or after its own measured time when it did not wait."""
    awaited = [i for i in last.values() if measured_end[i] <= e + SYNC_TOLERANCE_NS]
    began = state.host(s)
    if not awaited:
        end = began + (e - s) / state.host_speed
    else:
        gpu_done = max(int(measured_end[i]) for i in awaited)
        new_done = max(new_end[i] for i in awaited)
        waited = gpu_done > s
        # After the wait, the call took `tail` (negative within the tolerance: the two clocks disagree a little).
        tail = e - gpu_done if waited else 0
        own = max(tail, 0) if waited else e - s
        end = max(began + own / state.host_speed, new_done + tail / state.host_speed)
    state.shift = end - e / state.host_speed
    state.ends.append(e)
    state.shifts.append(state.shift)


def _host_map(state: _State, times: np.ndarray) -> np.ndarray:
    """Host times on the new timeline: scaled by the host speed, moved by the shift of the last blocking call
    that had returned by then."""
    ends = np.asarray(state.ends, dtype=np.int64)
    shifts = np.asarray(state.shifts, dtype=np.float64)
    order = np.argsort(ends, kind="stable")
    ends, shifts = ends[order], shifts[order]
    k = np.searchsorted(ends, times, side="right") - 1
    shift = np.where(k >= 0, shifts[np.maximum(k, 0)] if len(shifts) else 0.0, 0.0)
    return times / state.host_speed + shift


def replay(trace: Trace, device: int, rows: np.ndarray, new_dur: np.ndarray, host_speed: float = 1.0,
           device_info: DeviceInfo | None = None) -> Trace:
    """The trace as it would run with the activities `rows` (all GPU activity of `device`, sorted by start)
    taking `new_dur` ns, and the host running `host_speed` times as fast. Returns a new Trace."""
    ev = trace.events
    ops = _ops(trace, rows)
    calls = blocking_calls(trace)
    new_start, state = _simulate(ops, new_dur.astype(np.float64), ev.start[calls], ev.end[calls], host_speed)
    start = ev.start.astype(np.float64)
    end = ev.end.astype(np.float64)
    host = ~trace.is_gpu_activity
    start[host] = _host_map(state, start[host])
    end[host] = _host_map(state, end[host])
    start[rows] = new_start
    end[rows] = new_start + new_dur
    keep = ~ev.of_kind(*_DROPPED_KINDS)
    columns = {name: getattr(ev, name)[keep] for name in ev.__dataclass_fields__}
    columns["start"] = np.rint(start[keep]).astype(np.int64)
    columns["dur"] = np.maximum(np.rint(end[keep]).astype(np.int64) - columns["start"], 0)
    memory = trace.memory
    if len(memory):
        memory = type(memory).from_columns(
            time=np.rint(_host_map(state, memory.time.astype(np.float64))).astype(np.int64),
            device=memory.device, bytes=memory.bytes, total_allocated=memory.total_allocated,
            total_reserved=memory.total_reserved)
    meta = trace.meta
    if device_info is not None:
        meta = replace(meta, devices=tuple(device_info if d.id == device else d for d in meta.devices)
                       or (device_info,))
    return Trace(meta=meta, events=Events.from_columns(**columns), strings=trace.strings, memory=memory,
                 stacks=trace.stacks)
