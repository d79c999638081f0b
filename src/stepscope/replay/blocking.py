"""Where the host waits: calls that return only when the device has caught up, and DataLoader waits for batches
that worker processes make on their own clock."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from stepscope.analysis.launches import launching_call
from stepscope.analysis.syncs import is_sync_api
from stepscope.trace.model import CopyKind, HostMemory, Kind, Trace

# A batch from worker processes: the main process waits while the workers (not in the trace) make it.
WORKER_BATCH = re.compile(r"^enumerate\(DataLoader\)#_MultiProcessingDataLoaderIter\.__next__")
# A wait this much longer than the call's own time waited for its batch.
WAITED_NS = 50_000
# The most a call takes when its batch is ready (take it from the queue, rebuild tensors from shared memory, send
# the next index): when every call of the window waited, the quickest still holds a wait, so it is capped.
OWN_MAX_NS = 100_000


def blocking_calls(trace: Trace) -> np.ndarray:
    """Host calls that return only when the device has caught up: sync APIs and copies from or to pageable
    memory (the copy is staged through a host buffer), sorted by start. Found once per trace (the replay and each
    what-if ask again); read-only."""
    return trace.derived("replay.blocking_calls", lambda: _read_only(_blocking_calls(trace)))


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _blocking_calls(trace: Trace) -> np.ndarray:
    ev = trace.events
    runtime = np.flatnonzero(ev.kind == Kind.RUNTIME)
    sync = trace.names_where(is_sync_api)[runtime]
    link = launching_call(trace)
    copies = np.flatnonzero((link >= 0) & (ev.kind == Kind.MEMCPY) & (ev.host_memory == HostMemory.PAGEABLE)
                            & np.isin(ev.copy_kind, [CopyKind.HTOD, CopyKind.DTOH]))
    blocking = np.union1d(runtime[sync], link[copies])
    return blocking[np.argsort(ev.start[blocking], kind="stable")]


@dataclass(frozen=True)
class BatchWaits:
    """The main process's waits for batches from DataLoader workers, sorted by start."""

    rows: np.ndarray
    own_ns: np.ndarray  # what the call takes when its batch is ready: the quickest call, at most OWN_MAX_NS
    ready: np.ndarray  # the time the batch arrived (the call's end minus its own time), or -inf: it did not wait

    def __len__(self) -> int:
        return len(self.rows)


def batch_waits(trace: Trace) -> BatchWaits:
    """The main process's waits for worker batches; found once per trace, read-only."""
    return trace.derived("replay.batch_waits", lambda: _batch_waits(trace))


def _batch_waits(trace: Trace) -> BatchWaits:
    ev = trace.events
    rows = np.flatnonzero(ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION)
                          & trace.names_where(lambda s: WORKER_BATCH.match(s) is not None))
    if len(rows) == 0:
        empty = _read_only(np.zeros(0))
        return BatchWaits(_read_only(rows.astype(np.int64)), empty, empty)
    own = np.full(len(rows), float(min(ev.dur[rows].min(), OWN_MAX_NS)))
    waited = ev.dur[rows] > own + WAITED_NS
    ready = np.where(waited, ev.end[rows] - own, -np.inf)
    return BatchWaits(_read_only(rows.astype(np.int64)), _read_only(own), _read_only(ready))


# A launch call this much longer than the median launch, with this many launches still queued when it returned, waited
# for room in the device's launch queue: the host was as far ahead as CUDA lets it be.
QUEUE_FACTOR = 5.0
QUEUE_MIN_NS = 50_000
QUEUE_MIN_DEPTH = 64


@dataclass(frozen=True)
class QueueWaits:
    """Launch calls that waited for room in the launch queue (the host a full queue ahead of the device)."""

    rows: np.ndarray  # the launch calls
    awaited: np.ndarray  # per call, the device activity (index into the replay's DeviceOps) whose start made room
    tail: np.ndarray  # the call's end after that start, as recorded
    own_ns: float  # what a launch takes with room in the queue (the median launch)

    def __len__(self) -> int:
        return len(self.rows)


def queue_waits(trace: Trace, launch: np.ndarray, start: np.ndarray, link: np.ndarray,
                position: np.ndarray, by_position: np.ndarray) -> QueueWaits:
    """The launch calls that blocked on a full queue. `launch`, `start`: each activity's launch and start; `link`:
    its launching call (-1: none); `position`: its place in launch order, `by_position` the inverse."""
    ev = trace.events
    linked = np.flatnonzero(link >= 0)
    empty = QueueWaits(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), 0.0)
    if len(linked) < QUEUE_MIN_DEPTH:
        return empty
    calls = link[linked]
    dur = ev.dur[calls]
    own = float(np.median(dur))
    long = dur > max(QUEUE_FACTOR * own, QUEUE_MIN_NS)
    if not long.any():
        return empty
    ends = ev.end[calls[long]]
    # Launched before the call returned and not started by then: what was queued.
    queued = (np.searchsorted(np.sort(launch), ends, side="right")
              - np.searchsorted(np.sort(start), ends, side="right"))
    deep = queued >= QUEUE_MIN_DEPTH
    if not deep.any():
        return empty
    ops = linked[long][deep]
    depth = int(np.median(queued[deep]))
    awaited = by_position[np.maximum(position[ops] - depth, 0)]
    return QueueWaits(calls[long][deep], awaited, (ends[deep] - start[awaited]).astype(np.float64), own)
