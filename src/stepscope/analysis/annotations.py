"""What stepscope adds on top of a trace's own events: GPU idle gaps by cause, sync points with the op
and source line that caused them, and DataLoader waits."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.categories import DATALOADER
from stepscope.analysis.gpu import GpuUsage, IdleIntervals
from stepscope.analysis.hostops import enclosing_ops
from stepscope.analysis.steps import Steps
from stepscope.analysis.syncs import SyncSummary
from stepscope.analysis.time_by_line import line_of_row
from stepscope.model.kinds import Location
from stepscope.trace.model import Kind, Trace


@dataclass(frozen=True)
class SyncPoints:
    """The blocking sync calls inside the steps, with what made them."""

    rows: np.ndarray  # rows of the sync calls in the events table
    op: tuple[str, ...]  # outermost enclosing op on the same thread (what the user's code called)
    inner_op: tuple[str, ...]  # innermost enclosing op
    location: tuple[Location | None, ...]  # the user's line, when known


@dataclass(frozen=True)
class Annotations:
    """What the timelines and the annotated trace mark: steps, idle gaps, sync points, DataLoader waits."""

    steps: Steps
    idle: tuple[IdleIntervals, ...]
    syncs: SyncPoints
    dataloader: np.ndarray  # rows of the DataLoader waits (`enumerate(DataLoader)#...__next__`) in the steps


def annotations(trace: Trace, steps: Steps, syncs: SyncSummary, gpu: GpuUsage) -> Annotations:
    """Idle gaps, sync points and DataLoader waits of the steps, for timelines and annotated traces."""
    ev = trace.events
    host = ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON)
    loader = np.flatnonzero(host & trace.names_where(lambda s: DATALOADER.match(s) is not None))
    if len(steps):
        loader = loader[(ev.end[loader] > steps.start[0]) & (ev.start[loader] < steps.end[-1])]
    else:
        loader = loader[:0]
    return Annotations(steps=steps, idle=gpu.idle, syncs=sync_points(trace, syncs.rows),
                       dataloader=loader)


def sync_points(trace: Trace, rows: np.ndarray) -> SyncPoints:
    """Each sync call with the ops around it and the user's line it is charged to (see analysis.time_by_line)."""
    around = enclosing_ops(trace, rows)
    op, inner = [o for o, _ in around], [i for _, i in around]
    location = []
    for row in np.asarray(rows, dtype=np.int64).tolist():
        line = line_of_row(trace, row)
        location.append(line.location() if line is not None else None)
    return SyncPoints(np.asarray(rows, dtype=np.int64), tuple(op), tuple(inner), tuple(location))
