"""Host-side structure: per-thread keys, op nesting, and what each host op contains, vectorised.

Rows of different threads are compared on one time axis by shifting each thread's times by its own
offset (thread index x span), so one searchsorted answers "inside which op of the same thread".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.nesting import CHUNK_ROWS, number_threads
from stepscope.trace import intervals as iv
from stepscope.trace.growing import mapped_empty
from stepscope.trace.model import Kind, Trace, distinct, start_order


@dataclass(frozen=True, eq=False)
class HostThreads:
    """Each row's thread index (host rows only; -1 elsewhere) and the span that separates threads."""

    thread: np.ndarray
    span: int

    def shift(self, rows: np.ndarray, times: np.ndarray) -> np.ndarray:
        return self.thread[rows].astype(np.int64) * self.span + times


def host_threads(trace: Trace) -> HostThreads:
    """Number the host threads of a trace (CPU ops, annotations, Python frames, runtime calls); once per trace."""
    return trace.derived("host_threads", lambda: _host_threads(trace))


def _host_threads(trace: Trace) -> HostThreads:
    ev = trace.events
    host = ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON, Kind.RUNTIME)
    thread = mapped_empty(len(ev), np.int32)  # a few dozen threads; int32 halves a per-event index kept with the trace
    thread.fill(-1)
    number_threads(ev.pid, ev.tid, host, thread)
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
    """The rows not nested inside an earlier row of the same set on the same thread (returned sorted). In table
    order (by start, the longer first at equal starts) a row is outermost when it starts at or after the latest end
    of its thread's rows before it: a running maximum per thread, carried from one chunk of rows to the next so the
    working arrays stay a chunk long on a large trace."""
    if len(rows) == 0:
        return rows
    if not (rows[1:] > rows[:-1]).all():
        rows = distinct(rows)
    ev = trace.events
    thread = host_threads(trace).thread
    latest: dict[int, int] = {}  # thread -> the latest end of its rows so far
    kept = []
    for lo in range(0, len(rows), CHUNK_ROWS):
        part = rows[lo:lo + CHUNK_ROWS]
        threads = thread[part]
        top = np.empty(len(part), dtype=bool)
        for t in distinct(threads).tolist():
            at = np.flatnonzero(threads == t)
            mine = part[at]
            before = latest.get(t, np.iinfo(np.int64).min)
            ends = np.maximum(np.maximum.accumulate(ev.end[mine]), before)
            top[at[0]] = ev.start[mine[0]] >= before
            top[at[1:]] = ev.start[mine[1:]] >= ends[:-1]
            latest[t] = int(ends[-1])
        kept.append(part[top])
    return np.concatenate(kept)


def outer_cpu_ops(trace: Trace) -> np.ndarray:
    """The outermost CPU ops of every thread, once per trace (the zeroing signal and the launch costs ask)."""
    return trace.derived("outer_cpu_ops", lambda: outermost(trace, np.flatnonzero(trace.events.kind == Kind.CPU_OP)))


def nesting_depth(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """For rows sorted as the events table is (start, then longest first), how many rows of the set enclose
    each one on its thread: the rows before it in that order that have not ended when it starts."""
    ev = trace.events
    if len(rows) == 0:
        return np.zeros(0, dtype=np.int64)
    threads = host_threads(trace)
    starts = threads.shift(rows, ev.start[rows])
    order = start_order(starts, ev.dur[rows])
    position = np.empty(len(rows), dtype=np.int64)
    position[order] = np.arange(len(rows))
    ended = np.searchsorted(np.sort(threads.shift(rows, ev.end[rows])), starts, side="right")
    return position - ended


def self_time(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Each row's duration less the time its directly nested rows (same set, same thread) cover."""
    ev = trace.events
    threads = host_threads(trace)
    depth = nesting_depth(trace, rows)
    result = ev.dur[rows].astype(np.int64).copy()
    for d in range(int(depth.max()) if len(rows) else 0):
        parents, children = rows[depth == d], rows[depth == d + 1]
        covered = iv.union(threads.shift(children, ev.start[children]), threads.shift(children, ev.end[children]))
        result[depth == d] -= iv.coverage(covered, threads.shift(parents, ev.start[parents]),
                                          threads.shift(parents, ev.end[parents]))
    return result


NO_ENCLOSING_OP = "(no enclosing op)"


def enclosing_ops(trace: Trace, rows: np.ndarray) -> list[tuple[str, str]]:
    """For each host row, the outermost and innermost CPU op around it on its thread (NO_ENCLOSING_OP if none)."""
    ev = trace.events
    ops = np.flatnonzero(ev.kind == Kind.CPU_OP)
    by_thread: dict[tuple[int, int], np.ndarray] = {}
    result = []
    for row in np.asarray(rows, dtype=np.int64).tolist():
        key = (int(ev.pid[row]), int(ev.tid[row]))
        if key not in by_thread:
            by_thread[key] = ops[(ev.pid[ops] == key[0]) & (ev.tid[ops] == key[1])]
        thread_ops = by_thread[key]
        upto = thread_ops[: np.searchsorted(ev.start[thread_ops], ev.start[row], side="right")]
        around = upto[ev.end[upto] >= ev.end[row]]
        if len(around):
            result.append((trace.name_of(around[0]), trace.name_of(around[-1])))
        else:
            result.append((NO_ENCLOSING_OP, NO_ENCLOSING_OP))
    return result
