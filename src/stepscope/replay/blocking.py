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
    memory (the copy is staged through a host buffer), sorted by start."""
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
    ev = trace.events
    rows = np.flatnonzero(ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION)
                          & trace.names_where(lambda s: WORKER_BATCH.match(s) is not None))
    if len(rows) == 0:
        empty = np.zeros(0)
        return BatchWaits(rows.astype(np.int64), empty, empty)
    own = np.full(len(rows), float(min(ev.dur[rows].min(), OWN_MAX_NS)))
    waited = ev.dur[rows] > own + WAITED_NS
    ready = np.where(waited, ev.end[rows] - own, -np.inf)
    return BatchWaits(rows.astype(np.int64), own, ready)
