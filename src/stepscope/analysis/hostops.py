"""Host-side structure: per-thread keys, op nesting, and what each host op contains, vectorised.

Rows of different threads are compared on one time axis by shifting each thread's times by its own
offset (thread index x span), so one searchsorted answers "inside which op of the same thread".
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from stepscope.trace.model import Kind, Trace


@dataclass(frozen=True, eq=False)
class HostThreads:
    """Each row's thread index (host rows only; -1 elsewhere) and the span that separates threads."""

    thread: np.ndarray
    span: int

    def shift(self, rows: np.ndarray, times: np.ndarray) -> np.ndarray:
        return self.thread[rows].astype(np.int64) * self.span + times


@lru_cache(maxsize=8)
def host_threads(trace: Trace) -> HostThreads:
    """Number the host threads of a trace (CPU ops, annotations, Python frames, runtime calls)."""
    ev = trace.events
    host = ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON, Kind.RUNTIME)
    thread = np.full(len(ev), -1, dtype=np.int64)
    if host.any():
        pairs = np.stack([ev.pid[host], ev.tid[host]], axis=1)
        _, inverse = np.unique(pairs, axis=0, return_inverse=True)
        thread[host] = inverse.reshape(-1)
    span = int(ev.end.max()) + 1 if len(ev) else 1
    return HostThreads(thread, span)


def count_inside(trace: Trace, outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """For each outer row, how many inner rows of the same thread start inside it."""
    ev = trace.events
    threads = host_threads(trace)
    if len(outer) == 0 or len(inner) == 0:
        return np.zeros(len(outer), dtype=np.int64)
    points = np.sort(threads.shift(inner, ev.start[inner]))
    lo = np.searchsorted(points, threads.shift(outer, ev.start[outer]), side="left")
    hi = np.searchsorted(points, threads.shift(outer, ev.end[outer]), side="left")
    return hi - lo


def inside_any(trace: Trace, outer: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each row, whether it starts inside one of the outer rows of its own thread."""
    ev = trace.events
    threads = host_threads(trace)
    if len(outer) == 0 or len(rows) == 0:
        return np.zeros(len(rows), dtype=bool)
    starts = threads.shift(outer, ev.start[outer])
    order = np.argsort(starts, kind="stable")
    starts = starts[order]
    running_end = np.maximum.accumulate(threads.shift(outer, ev.end[outer])[order])
    t = threads.shift(rows, ev.start[rows])
    k = np.searchsorted(starts, t, side="right") - 1
    hit = k >= 0
    hit[hit] &= running_end[k[hit]] > t[hit]
    return hit


def outermost(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The rows not nested inside an earlier row of the same set on the same thread (rows sorted by start)."""
    ev = trace.events
    if len(rows) == 0:
        return rows
    threads = host_threads(trace)
    starts = threads.shift(rows, ev.start[rows])
    order = np.lexsort((-ev.dur[rows], starts))
    rows, starts = rows[order], starts[order]
    running_end = np.maximum.accumulate(threads.shift(rows, ev.end[rows]))
    top = np.concatenate([[True], starts[1:] >= running_end[:-1]])
    return np.sort(rows[top])
