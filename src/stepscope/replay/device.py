"""The device side of the step's graph: each GPU activity, what it waited for, and what nothing explains.

Every activity's measured start is explained by what it waited for: the previous activity on its stream (plus a
small queue gap), its launch (plus the launch latency), or an activity on another stream that ended just before
it; what none of them explains is kept as a fixed delay. With the measured times the replay reproduces the
measured device timeline exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from stepscope.analysis.launches import launching_call
from stepscope.trace.model import Trace, distinct

QUEUE_GAP_NS = 2_000  # a gap up to this long between queued work on a stream is the stream's own overhead
IDLE_STREAM_NS = 5_000  # a stream idle this long before an activity was waiting for its launch
DEFAULT_LAUNCH_LATENCY_NS = 5_000  # launch call start to activity start, when no activity shows it
MAX_LAUNCH_LATENCY_NS = 50_000  # an activity that starts later than this after its launch on an idle stream waited
EXACT_INT = 2**52  # integers of the walk below this: their sums in doubles are exact, as the Python loop's are
DEPENDENCY_WINDOW_NS = 5_000  # an unexplained wait ending within this of another stream's activity waited on it


@dataclass(frozen=True)
class DeviceOps:
    """The device's activities (the rows given, in that order) with what the replay needs of each."""

    rows: np.ndarray  # their rows in the trace
    start: np.ndarray
    end: np.ndarray  # measured
    stream: np.ndarray
    launch: np.ndarray  # host time of the launch call's start (unlinked: start minus the launch latency)
    linked: np.ndarray  # bool: the launch is a recorded runtime call
    latency: np.ndarray  # launch to start, at most the typical latency
    prev: np.ndarray  # index of the previous activity on the same stream, -1 for the first
    gap: np.ndarray  # queue gap kept after the previous activity
    dep: np.ndarray  # index of an activity on another stream this one waited for, -1 for none
    delay: np.ndarray  # what nothing explains
    order: np.ndarray  # processing order (launch order, kept per stream)
    key: np.ndarray  # the host time at which each is processed

    def __len__(self) -> int:
        return len(self.rows)

    @cached_property
    def walk(self) -> Walk:
        """The activities in processing order, for the replay's loop; made once (the what-ifs share the ops)."""
        order = self.order
        place = np.empty(len(order), dtype=np.int64)
        place[order] = np.arange(len(order))
        dep = self.dep[order]
        in_order = self.stream[order]
        prev, gap, dep_end, delay = self.prev[order], self.gap[order], self.end[np.maximum(dep, 0)], self.delay[order]
        dep_done = place[np.maximum(dep, 0)] < np.arange(len(order))
        columns = tuple(np.ascontiguousarray(c, dtype=np.int64) for c in (order, prev, gap, dep, dep_end, delay))
        exact = all(not len(c) or int(np.abs(c).max()) < EXACT_INT for c in columns[2:])
        return Walk(index=order.tolist(), place=place.tolist(), prev=prev.tolist(), gap=gap.tolist(), dep=dep.tolist(),
                    dep_done=dep_done.tolist(), dep_end=dep_end.tolist(), delay=delay.tolist(),
                    streams=tuple(np.flatnonzero(in_order == s) for s in dict.fromkeys(in_order.tolist())),
                    arrays=(*columns, dep_done.astype(np.bool_)) if exact else None)


@dataclass(frozen=True)
class Walk:
    """Device activities in processing order as Python lists, read one at a time by the replay's loop (numpy scalars
    one at a time cost several times more), and what a wait asks of the walk so far."""

    index: list[int]  # the activity at each place of the order
    place: list[int]  # each activity's place in it
    prev: list[int]  # from here on, each at its place: DeviceOps' fields of that name (not the latency: the
    # replay adds it to the launch times at once)
    gap: list[int]
    dep: list[int]
    dep_done: list[bool]  # the dependency comes earlier in the order (else its measured end stands in)
    dep_end: list[int]  # the dependency's measured end
    delay: list[int]
    streams: tuple[np.ndarray, ...]  # each stream's places, rising; streams in the order they first come
    # index, prev, gap, dep, dep_end, delay (int64) and dep_done (bool) as arrays, for the loop in C (_walk.c); None
    # where an integer is too large for a double to hold the Python loop's sums exactly
    arrays: tuple[np.ndarray, ...] | None = None

    def last_done(self, done: int) -> list[int]:
        """Each stream's last activity among the first `done` of the order."""
        lasts = []
        for places in self.streams:
            k = int(np.searchsorted(places, done, side="left")) - 1
            if k >= 0:
                lasts.append(self.index[int(places[k])])
        return lasts


def _streams(start: np.ndarray, end: np.ndarray, stream: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(stream, kind="stable")
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
    rows = np.flatnonzero(waiting)
    # The searches at once, the walks back on lists: numpy scalars one at a time cost several times more.
    last = (np.searchsorted(ends, start[rows], side="right") - 1).tolist()
    ends_, by_end_, stream_, start_ = ends.tolist(), by_end.tolist(), stream.tolist(), start.tolist()
    for i, k in zip(rows.tolist(), last, strict=True):
        while k >= 0 and ends_[k] >= start_[i] - DEPENDENCY_WINDOW_NS:
            j = by_end_[k]
            if stream_[j] != stream_[i]:
                dep[i] = j
                break
            k -= 1
    return dep


def device_ops(trace: Trace, rows: np.ndarray) -> DeviceOps:
    """The graph's device nodes for the GPU activities `rows` (sorted by start)."""
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
    # Work queued behind the stream's previous activity starts a small gap after it ends. An activity that found
    # its stream idle shows no such gap: it takes the gap queued work shows in this trace, if any does.
    queued = (prev >= 0) & (launch + latency < end[np.maximum(prev, 0)]) & (queue <= QUEUE_GAP_NS)
    typical_gap = int(np.median(queue[queued])) if queued.any() else 0
    gap = np.where(queue <= QUEUE_GAP_NS, queue, typical_gap)
    prev_end = np.where(prev >= 0, end[np.maximum(prev, 0)] + gap, np.iinfo(np.int64).min)
    explained = np.maximum(prev_end, launch + latency)
    dep = _dependencies(start, end, stream, start - explained > QUEUE_GAP_NS)
    explained = np.where(dep >= 0, np.maximum(explained, end[np.maximum(dep, 0)]), explained)
    key = launch.copy()
    for s in distinct(stream):  # per stream, launch order is execution order
        members = np.flatnonzero(stream == s)
        key[members] = np.maximum.accumulate(key[members])
    order = np.argsort(key, kind="stable")  # launch order; ties as given
    return DeviceOps(rows=rows, start=start, end=end, stream=stream, launch=launch, linked=linked, latency=latency,
                     prev=prev, gap=gap, dep=dep, delay=start - explained, order=order, key=key)
