"""What stepscope adds on top of a trace's own events: GPU idle gaps by cause, sync points with the op
and source line that caused them, and DataLoader waits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stepscope.analysis.categories import DATALOADER
from stepscope.analysis.gpu import IdleIntervals, idle_intervals
from stepscope.analysis.lines import line_of_row
from stepscope.analysis.steps import Steps
from stepscope.analysis.syncs import SyncSummary
from stepscope.trace.model import Kind, Trace


@dataclass(frozen=True)
class SyncPoints:
    """The blocking sync calls inside the steps, with what made them."""

    rows: np.ndarray  # rows of the sync calls in the events table
    op: tuple[str, ...]  # outermost enclosing op on the same thread (what the user's code called)
    inner_op: tuple[str, ...]  # innermost enclosing op
    location: tuple[dict[str, Any] | None, ...]  # the user's line (file, line, function, code) when known


@dataclass(frozen=True)
class Annotations:
    steps: Steps
    idle: tuple[IdleIntervals, ...]
    syncs: SyncPoints
    dataloader: np.ndarray  # rows of the DataLoader waits (`enumerate(DataLoader)#...__next__`) in the steps


def annotations(trace: Trace, steps: Steps, syncs: SyncSummary) -> Annotations:
    """Idle gaps, sync points and DataLoader waits of the steps, for timelines and annotated traces."""
    ev = trace.events
    host = ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON)
    loader = np.flatnonzero(host & trace.names_where(lambda s: DATALOADER.match(s) is not None))
    if len(steps):
        loader = loader[(ev.end[loader] > steps.start[0]) & (ev.start[loader] < steps.end[-1])]
    else:
        loader = loader[:0]
    return Annotations(steps=steps, idle=idle_intervals(trace, steps), syncs=sync_points(trace, syncs.rows),
                       dataloader=loader)


def sync_points(trace: Trace, rows: np.ndarray) -> SyncPoints:
    """Each sync call with the ops around it and the user's line it is charged to (see analysis.lines)."""
    ops = _enclosing(trace, rows, np.flatnonzero(trace.events.kind == Kind.CPU_OP))
    op, inner, location = [], [], []
    for i, row in enumerate(rows.tolist()):
        found = ops[i][ops[i] >= 0]
        op.append(trace.name_of(found[0]) if len(found) else "(no enclosing op)")
        inner.append(trace.name_of(found[-1]) if len(found) else "(no enclosing op)")
        line = line_of_row(trace, row)
        location.append(line.location() if line is not None else None)
    return SyncPoints(np.asarray(rows, dtype=np.int64), tuple(op), tuple(inner), tuple(location))


def _enclosing(trace: Trace, rows: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """For each row, the candidate events on its thread that enclose it, outermost first (-1 pads).

    Candidates on one thread nest, so sorted by start each has depth i - (ends at or before its start);
    the enclosing event at depth d is the last one of that depth starting at or before the row.
    """
    ev = trace.events
    per_thread: list[tuple[np.ndarray, np.ndarray]] = []
    thread_of_row = ev.pid[rows] * (1 << 32) + ev.tid[rows]
    thread_of_cand = ev.pid[candidates] * (1 << 32) + ev.tid[candidates]
    for thread in np.unique(thread_of_row):
        cand = candidates[thread_of_cand == thread]  # sorted by start, as the table is
        if len(cand) == 0:
            continue
        sel = np.flatnonzero(thread_of_row == thread)
        depth = np.arange(len(cand)) - np.searchsorted(np.sort(ev.end[cand]), ev.start[cand], side="right")
        depth = np.maximum(depth, 0)
        found = np.full((len(sel), int(depth.max()) + 1), -1, dtype=np.int64)
        for d in range(found.shape[1]):
            at = cand[depth == d]
            if len(at) == 0:
                continue
            k = np.searchsorted(ev.start[at], ev.start[rows[sel]], side="right") - 1
            hit = at[np.maximum(k, 0)]
            found[:, d] = np.where((k >= 0) & (ev.end[hit] >= ev.end[rows[sel]]), hit, -1)
        per_thread.append((sel, found))
    out = np.full((len(rows), max((f.shape[1] for _, f in per_thread), default=0)), -1, dtype=np.int64)
    for sel, found in per_thread:
        out[sel, : found.shape[1]] = found
    return out
