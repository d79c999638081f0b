"""Interval algebra on sorted int64 arrays: union, intersect, subtract, coverage per window.

An `Intervals` value is always a set of disjoint, sorted, non-empty half-open intervals [start, end).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import NamedTuple

import numpy as np


class Intervals(NamedTuple):
    starts: np.ndarray
    ends: np.ndarray

    def __len__(self) -> int:  # type: ignore[override]
        return len(self.starts)

    @property
    def total(self) -> int:
        return int((self.ends - self.starts).sum())


EMPTY = Intervals(np.zeros(0, np.int64), np.zeros(0, np.int64))


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge possibly overlapping intervals into disjoint sorted ones."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    del keep
    if len(starts) == 0:
        return EMPTY
    if not (starts[1:] >= starts[:-1]).all():  # rows of the events table come sorted: no sort, no copies
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        del order
    running_end = np.maximum.accumulate(ends)
    del ends
    # A new merged interval begins where a start lies beyond every end seen so far; the one before it ends a group.
    # Masks, not row numbers: a byte per interval instead of 8 (often every interval is its own group).
    new_group = np.empty(len(starts), dtype=bool)
    new_group[0] = True
    np.greater(starts[1:], running_end[:-1], out=new_group[1:])
    if new_group.all():  # already disjoint: the intervals as given (never written to: Intervals are values)
        return Intervals(starts, running_end)
    last = np.empty(len(starts), dtype=bool)
    last[:-1], last[-1] = new_group[1:], True
    merged_starts = starts[new_group]
    del starts, new_group
    return Intervals(merged_starts, running_end[last])


def union_of(starts: np.ndarray, durs: np.ndarray, rows: np.ndarray) -> Intervals:
    """union(starts[rows], starts[rows] + durs[rows]) for `rows` a boolean mask over whole columns (a table's starts
    and durations: its ends are made for the rows selected only, not as a column of the whole table), a window of the
    table at a time: the selected copies and union's working arrays would be some 35 bytes per selected row, while
    the union itself is usually far smaller (host ops nest). The same intervals either way."""
    n = len(rows)
    if n <= 2 * WINDOW:
        selected = starts[rows]
        return union(selected, selected + durs[rows])
    parts = []
    separate = True  # no window's intervals reach into the next's: the windows' unions joined are the union
    reach = _MIN
    for lo in range(0, n, WINDOW):
        window = rows[lo:lo + WINDOW]
        selected = starts[lo:lo + WINDOW][window]
        part = union(selected, selected + durs[lo:lo + WINDOW][window])
        if len(part):
            separate = separate and int(part.starts[0]) > reach  # union joins a start at the reach so far
            reach = max(reach, int(part.ends[-1]))
            parts.append(part)
    joined = _joined(parts)
    return joined if separate else union(*joined)


def _joined(parts: list[Intervals]) -> Intervals:
    """The parts' starts and ends concatenated, the list emptied on the way (each part let go once copied)."""
    ends = [p.ends for p in parts]
    starts = [p.starts for p in parts]
    parts.clear()
    joined_starts = np.concatenate(starts) if starts else EMPTY.starts
    del starts
    joined_ends = np.concatenate(ends) if ends else EMPTY.ends
    return Intervals(joined_starts, joined_ends)


def _combine(a: Intervals, b: Intervals, keep_a: bool, keep_b: bool, both: bool) -> Intervals:
    """Sweep the boundaries of two interval sets and keep the segments whose membership matches."""
    if len(a) == 0 and len(b) == 0:
        return EMPTY
    points = np.concatenate([a.starts, a.ends, b.starts, b.ends])
    # +1 at a start, -1 at an end, per set: int8 (a set's intervals are disjoint, so its count is 0 or 1)
    na, nb = len(a), len(b)
    da, db = np.zeros(len(points), np.int8), np.zeros(len(points), np.int8)
    da[:na], da[na : 2 * na], db[2 * na : 2 * na + nb], db[2 * na + nb :] = 1, -1, 1, -1
    order = np.argsort(points, kind="stable")
    points = points[order]
    in_a = np.cumsum(da[order], dtype=np.int8) > 0
    in_b = np.cumsum(db[order], dtype=np.int8) > 0
    del da, db, order
    select = (in_a & in_b) if both else ((in_a & ~in_b) if keep_a else (in_b & ~in_a))
    del keep_b
    seg_start, seg_end = points[:-1], points[1:]
    select = select[:-1] & (seg_end > seg_start)
    return union(seg_start[select], seg_end[select])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    if len(a) == 0 or len(b) == 0:
        return EMPTY
    return _by_window(lambda x, y: _combine(x, y, keep_a=False, keep_b=False, both=True) if len(x) and len(y)
                      else EMPTY, a, b)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """The parts of `a` not covered by `b`."""
    if len(a) == 0 or len(b) == 0:
        return a
    return _by_window(lambda x, y: _combine(x, y, keep_a=True, keep_b=False, both=False) if len(x) and len(y)
                      else x, a, b)


def merge(a: Intervals, b: Intervals) -> Intervals:
    """The union of two interval sets."""
    return _by_window(lambda x, y: union(np.concatenate([x.starts, y.starts]), np.concatenate([x.ends, y.ends])),
                      a, b)


# Two large sets are combined a window of time at a time (about this many intervals of each set in a window): the
# sweep's working arrays are some 35 bytes per boundary, tens of MB on a trace of gigabytes.
WINDOW = 1 << 17
_MIN, _MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def _by_window(combine: Callable[[Intervals, Intervals], Intervals], a: Intervals, b: Intervals) -> Intervals:
    """combine(a, b) for an operation that works on each stretch of time apart (union, intersection, difference):
    each window's parts of `a` and `b`, cut at its edges, then the results joined where they touch at the cuts.
    The same intervals as combining the whole sets."""
    if len(a) + len(b) <= 2 * WINDOW:
        return combine(a, b)
    cuts = np.unique(np.concatenate([a.starts[WINDOW::WINDOW], b.starts[WINDOW::WINDOW]])).tolist()
    edges = [_MIN, *cuts, _MAX]
    parts = [combine(_inside(a, lo, hi), _inside(b, lo, hi)) for lo, hi in pairwise(edges)]
    del a, b  # the caller's sets may be let go while the parts are joined
    starts, ends = _joined(parts)
    touching = starts[1:] == ends[:-1]  # one interval cut at a window's edge
    if not touching.any():
        return Intervals(starts, ends)
    keep = np.empty(len(starts), dtype=bool)
    keep[0] = True
    np.logical_not(touching, out=keep[1:])
    starts = starts[keep]
    keep[:-1], keep[-1] = keep[1:], True  # the end before each kept start but the first, and the last end
    del touching
    return Intervals(starts, ends[keep])


def _inside(a: Intervals, lo: int, hi: int) -> Intervals:
    """The parts of `a` in [lo, hi): a slice of it (disjoint and sorted: only its first and last can cross)."""
    i0 = int(np.searchsorted(a.ends, lo, side="right"))
    i1 = int(np.searchsorted(a.starts, hi, side="left"))
    if i1 <= i0:
        return EMPTY
    starts, ends = a.starts[i0:i1].copy(), a.ends[i0:i1].copy()
    starts[0], ends[-1] = max(int(starts[0]), lo), min(int(ends[-1]), hi)
    return Intervals(starts, ends)


def clip(a: Intervals, lo: int, hi: int) -> Intervals:
    """The parts of `a` inside [lo, hi)."""
    return intersect(a, Intervals(np.array([lo], np.int64), np.array([hi], np.int64))) if hi > lo else EMPTY


def covered_until(a: Intervals, times: np.ndarray) -> np.ndarray:
    """For each time t, the length of `a` that lies before t."""
    times = np.asarray(times, dtype=np.int64)
    if len(a) == 0:
        return np.zeros(len(times), dtype=np.int64)
    lengths = a.ends - a.starts
    before = np.concatenate([[0], np.cumsum(lengths)])
    k = np.searchsorted(a.starts, times, side="right")  # intervals starting at or before t
    partial = np.zeros(len(times), dtype=np.int64)
    inside = k > 0
    idx = k[inside] - 1
    partial[inside] = np.minimum(times[inside] - a.starts[idx], lengths[idx])
    return before[np.maximum(k - 1, 0)] * inside + partial


def coverage(a: Intervals, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Length of `a` inside each window [lo[i], hi[i])."""
    return covered_until(a, hi) - covered_until(a, lo)


def complement(a: Intervals, lo: int, hi: int) -> Intervals:
    """The gaps of `a` inside [lo, hi)."""
    return subtract(Intervals(np.array([lo], np.int64), np.array([hi], np.int64)), a) if hi > lo else EMPTY
