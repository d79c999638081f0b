"""Nesting of ranges on one thread: parents, and the innermost range around each query interval.

Ranges on one host thread nest (a range starts after and ends before the one around it). All inputs are
sorted by start, longer first at equal starts, as the events table is.
"""

from __future__ import annotations

import numpy as np

from stepscope.trace.model import distinct

NONE = -1


def parents(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each range, the index of the innermost earlier range that encloses it, else -1."""
    parent = np.full(len(start), NONE, dtype=np.int64)
    ends = end.tolist()
    stack: list[int] = []
    for i, e in enumerate(ends):
        while stack and ends[stack[-1]] < e:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


def innermost(start: np.ndarray, end: np.ndarray, parent: np.ndarray, q_start: np.ndarray,
              q_end: np.ndarray) -> np.ndarray:
    """For each query interval, the index of the innermost range that encloses it, else -1."""
    if len(start) == 0:
        return np.full(len(q_start), NONE, dtype=np.int64)
    found = np.searchsorted(start, q_start, side="right") - 1
    while True:
        open_ = found >= 0
        bad = np.flatnonzero(open_)[end[found[open_]] < q_end[open_]]
        if len(bad) == 0:
            return found
        found[bad] = parent[found[bad]]


def first_inside(start: np.ndarray, q_start: np.ndarray, q_end: np.ndarray) -> np.ndarray:
    """For each query interval, the index of the first range that starts inside it, else -1."""
    if len(start) == 0:
        return np.full(len(q_start), NONE, dtype=np.int64)
    found = np.searchsorted(start, q_start, side="left")
    inside = found < len(start)
    inside[inside] &= start[found[inside]] < q_end[inside]
    return np.where(inside, found, NONE)


def thread_numbers(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Each row's thread as a dense number 0..k-1 (one number per (pid, tid) pair).

    pids and tids are numbered apart, then their pairs: 1-D uniques are ~20x faster than unique(axis=0)."""
    if len(pid) == 0:
        return np.zeros(0, dtype=np.int64)
    # A trace has a few dozen threads: number the distinct values and look each row up in them, instead of
    # unique(..., return_inverse=True), which sorts every row three times.
    pids, tids = distinct(pid), distinct(tid)
    pair = np.searchsorted(pids, pid).astype(np.int64)
    pair *= len(tids)
    pair += np.searchsorted(tids, tid)
    return np.searchsorted(distinct(pair), pair)


CHUNK_ROWS = 1 << 18  # table rows at a time in number_threads and hostops.outermost


def number_threads(pid: np.ndarray, tid: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
    """out[rows] = thread_numbers(pid[rows], tid[rows]) for `rows` a boolean mask over whole columns, a chunk of
    the table at a time: the selected pids and tids of a large trace would be 16 bytes a row, while the distinct
    values are a few dozen. Three passes: the distinct pids and tids, the distinct pairs, then each row's number."""
    chunks = [slice(lo, min(lo + CHUNK_ROWS, len(rows))) for lo in range(0, len(rows), CHUNK_ROWS)] or [slice(0, 0)]
    pids = distinct(np.concatenate([distinct(pid[c][rows[c]]) for c in chunks]))
    tids = distinct(np.concatenate([distinct(tid[c][rows[c]]) for c in chunks]))

    def pairs_of(c: slice) -> np.ndarray:
        pair = np.searchsorted(pids, pid[c][rows[c]]).astype(np.int64)
        pair *= len(tids)
        pair += np.searchsorted(tids, tid[c][rows[c]])
        return pair

    pairs = distinct(np.concatenate([distinct(pairs_of(c)) for c in chunks]))
    for c in chunks:
        out[c][rows[c]] = np.searchsorted(pairs, pairs_of(c))


def thread_groups(pid: np.ndarray, tid: np.ndarray) -> list[np.ndarray]:
    """Positions (into the given arrays) of each thread's rows, in their original order."""
    if len(pid) == 0:
        return []
    inverse = thread_numbers(pid, tid)
    order = np.argsort(inverse, kind="stable")
    bounds = np.flatnonzero(np.diff(inverse[order])) + 1
    return np.split(order, bounds)
