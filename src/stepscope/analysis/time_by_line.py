"""Time by user source line, forward and backward apart; the line behind each sync; locations for advice.

CPU time of a line is the exclusive time of its anchors (see source_map); GPU time is the kernel time
launched from them. "Forward" is what the line ran itself, "backward" the autograd nodes of the ops it
created. Only anchors that start inside the steps count; figures are totals over the steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.source_map import (
    BACKWARD,
    BACKWARD_NODE_PREFIX,
    BACKWARD_UNLINKED,
    FORWARD,
    SourceLine,
    SourceMap,
    source_map,
)
from stepscope.analysis.steps import Steps
from stepscope.analysis.syncs import SyncCause, is_sync_api
from stepscope.model.kinds import Location
from stepscope.trace.intervals import union
from stepscope.trace.model import Kind, Trace

# Reads of a device value into Python: on a GPU they wait for the device. On a CPU-only trace there is no
# sync call to see, so these ops stand for the sync they would be.
SCALAR_READ_OPS = frozenset({"aten::_local_scalar_dense"})
# The profiler's ranges around the step meter's data and optimizer phases: a forward anchor that starts inside one
# ran in that phase (the meter's data wait, its optimizer step); the rest of the forward anchors ran in the forward,
# a sync or the rest of the step.
PHASE_RANGES = {"data": ("enumerate(DataLoader)#", "enumerate(DataPipe)#"), "optimizer": ("Optimizer.step#",)}


@dataclass(frozen=True)
class Cost:
    """Time of one line, module or unattributed group over all steps (ns), forward and backward apart."""

    cpu_fwd_ns: int = 0
    cpu_bwd_ns: int = 0
    gpu_fwd_ns: int = 0
    gpu_bwd_ns: int = 0
    kernels_fwd: int = 0
    kernels_bwd: int = 0
    # Of cpu_fwd_ns, what ran inside the DataLoader's and the optimizer step's ranges (PHASE_RANGES): the parts the
    # pipeline fits into the meter's data and optimizer phases (the rest of the forward into its forward and other).
    cpu_fwd_data_ns: int = 0
    cpu_fwd_optimizer_ns: int = 0

    @property
    def cpu_ns(self) -> int:
        return self.cpu_fwd_ns + self.cpu_bwd_ns

    @property
    def gpu_ns(self) -> int:
        return self.gpu_fwd_ns + self.gpu_bwd_ns

    @property
    def kernels(self) -> int:
        return self.kernels_fwd + self.kernels_bwd


@dataclass(frozen=True)
class LineCost:
    """One user line and what it costs."""

    line: SourceLine
    cost: Cost


@dataclass(frozen=True)
class Unattributed:
    """Time no user line can take, and why: e.g. an autograd node whose forward op is not in the trace."""

    reason: str  # "no user line" | "backward: forward op not found" | "backward: forward op has no user line"
    what: str  # the op or autograd node
    cost: Cost


@dataclass(frozen=True)
class SyncLine:
    """Host-device syncs (or, on a CPU-only trace, scalar reads) made from one line through one op."""

    line: SourceLine | None
    op: str  # the op charged (what the line called), e.g. aten::item
    via: str  # the sync call (cudaStreamSynchronize) or, on a CPU-only trace, the scalar-read op
    count: int
    total_ns: int


@dataclass(frozen=True)
class LineSummary:
    """The steps' time by user line, the time no line can take, and the lines that synchronise."""

    source: str
    granularity: str
    steps: int
    step_ns: int  # total step time
    lines: tuple[LineCost, ...]  # most expensive first
    unattributed: tuple[Unattributed, ...]
    syncs: tuple[SyncLine, ...]

    @property
    def attributed_cpu_share(self) -> float:
        """The part of the anchors' CPU time that found a user line."""
        mine = sum(c.cost.cpu_ns for c in self.lines)
        total = mine + sum(u.cost.cpu_ns for u in self.unattributed)
        return mine / total if total else 0.0


def costs_by(sm: SourceMap, trace: Trace, steps: Steps, group: np.ndarray, groups: int) -> list[Cost]:
    """Cost of each group, where `group` gives each anchor a group in [0, groups) or -1 (left out)."""
    ev = trace.events
    step = steps.index_of(ev.start[sm.anchors], host=True)
    counted = (step >= 0) & (group >= 0)
    # An anchor that outlasts its step's host range (the call that closed the profiler's window, which then
    # flushed the trace inside it) is charged only its time inside the step.
    overhang = np.maximum(ev.end[sm.anchors] - steps.cpu_end[np.maximum(step, 0)], 0) if len(steps) else 0
    exclusive = np.maximum(sm.exclusive - overhang, 0)
    bwd = sm.direction != FORWARD  # linked or not
    cpu = [np.bincount(group[counted & (bwd == b)], weights=exclusive[counted & (bwd == b)], minlength=groups)
           for b in (False, True)]
    inside = {phase: counted & ~bwd & _starts_inside(trace, ev.start[sm.anchors], prefixes)
              for phase, prefixes in PHASE_RANGES.items()}
    by_phase = {phase: np.bincount(group[sel], weights=exclusive[sel], minlength=groups)
                for phase, sel in inside.items()}
    kernels = np.flatnonzero((ev.kind == Kind.KERNEL) & (sm.row_anchor >= 0))
    anchor = sm.row_anchor[kernels]
    keep = counted[anchor]
    kernels, anchor = kernels[keep], anchor[keep]
    gpu, count = [], []
    for b in (False, True):
        sel = bwd[anchor] == b
        gpu.append(np.bincount(group[anchor[sel]], weights=ev.dur[kernels[sel]], minlength=groups))
        count.append(np.bincount(group[anchor[sel]], minlength=groups))
    return [Cost(int(cpu[0][i]), int(cpu[1][i]), int(gpu[0][i]), int(gpu[1][i]), int(count[0][i]), int(count[1][i]),
                 int(by_phase["data"][i]), int(by_phase["optimizer"][i]))
            for i in range(groups)]


def _starts_inside(trace: Trace, starts: np.ndarray, prefixes: tuple[str, ...]) -> np.ndarray:
    """Which of `starts` fall inside a range whose name starts with one of `prefixes` (their union)."""
    rows = trace.names_where(lambda name: name.startswith(prefixes))
    if not rows.any():
        return np.zeros(len(starts), dtype=bool)
    lo, hi = union(trace.events.start[rows], trace.events.end[rows])
    at = np.searchsorted(lo, starts, side="right") - 1
    return (at >= 0) & (starts < hi[np.maximum(at, 0)])


def line_summary(trace: Trace, steps: Steps) -> LineSummary | None:
    """Time by user line over the steps; None when the trace carries no source information."""
    sm = source_map(trace)
    if sm is None or len(steps) == 0:
        return None
    costs = costs_by(sm, trace, steps, sm.line, len(sm.lines))
    lines = [LineCost(line, cost) for line, cost in zip(sm.lines, costs, strict=True) if cost.cpu_ns or cost.gpu_ns]
    lines.sort(key=lambda c: -max(c.cost.cpu_ns, c.cost.gpu_ns))
    return LineSummary(
        source=sm.source, granularity=sm.granularity, steps=len(steps), step_ns=int(steps.duration.sum()),
        lines=tuple(lines), unattributed=_unattributed(sm, trace, steps), syncs=sync_lines(trace, steps),
    )


def _unattributed(sm: SourceMap, trace: Trace, steps: Steps) -> tuple[Unattributed, ...]:
    names = [trace.name_of(r).removeprefix(BACKWARD_NODE_PREFIX) for r in sm.anchors]
    keys: dict[tuple[str, str], int] = {}
    group = np.full(len(sm.anchors), -1, dtype=np.int64)
    for i in np.flatnonzero(sm.line < 0).tolist():
        if sm.direction[i] == BACKWARD_UNLINKED:
            reason = "backward: forward op not found"
        elif sm.direction[i] == BACKWARD:
            reason = "backward: forward op has no user line"
        else:
            reason = "no user line"
        group[i] = keys.setdefault((reason, names[i]), len(keys))
    costs = costs_by(sm, trace, steps, group, len(keys))
    rows = [Unattributed(reason, what, cost) for (reason, what), cost in zip(keys, costs, strict=True)
            if cost.cpu_ns or cost.gpu_ns]
    rows.sort(key=lambda u: -max(u.cost.cpu_ns, u.cost.gpu_ns))
    return tuple(rows)


def sync_rows(trace: Trace) -> np.ndarray:
    """The sync calls; on a trace without GPU activity, the scalar-read ops that would sync on a GPU."""
    ev = trace.events
    if trace.has_device_events:
        return np.flatnonzero((ev.kind == Kind.RUNTIME) & trace.names_where(is_sync_api))
    return np.flatnonzero((ev.kind == Kind.CPU_OP) & trace.names_where(lambda s: s in SCALAR_READ_OPS))


def sync_lines(trace: Trace, steps: Steps | None = None) -> tuple[SyncLine, ...]:
    """The syncs grouped by (line, op charged, sync call), most time first."""
    sm = source_map(trace)
    rows = sync_rows(trace)
    if steps is not None:
        rows = rows[steps.index_of(trace.events.start[rows], host=True) >= 0]
    groups: dict[tuple[SourceLine | None, str, str], list[int]] = {}
    for row in rows.tolist():
        anchor = sm.row_anchor[row] if sm is not None else -1
        line = sm.lines[sm.line[anchor]] if sm is not None and anchor >= 0 and sm.line[anchor] >= 0 else None
        op = trace.name_of(sm.anchors[anchor]) if sm is not None and anchor >= 0 else "(no enclosing op)"
        groups.setdefault((line, op, trace.name_of(row)), []).append(row)
    found = [SyncLine(line, op, via, len(r), int(trace.events.dur[r].sum())) for (line, op, via), r in groups.items()]
    found.sort(key=lambda s: -s.total_ns)
    return tuple(found)


def line_of_row(trace: Trace, row: int) -> SourceLine | None:
    """The user line a host event or GPU activity is charged to, if the trace says."""
    sm = source_map(trace)
    if sm is None or sm.row_anchor[row] < 0:
        return None
    index = sm.line[sm.row_anchor[row]]
    return sm.lines[index] if index >= 0 else None


def location_of_rows(trace: Trace, rows: np.ndarray) -> Location | None:
    """The `location` for a recommendation about these events: the line charged with most of their time."""
    sm = source_map(trace)
    rows = np.asarray(rows, dtype=np.int64)
    if sm is None or len(rows) == 0:
        return None
    anchor = sm.row_anchor[rows]
    keep = anchor >= 0
    line = sm.line[anchor[keep]]
    mine = line >= 0
    if not mine.any():
        return None
    weight = np.bincount(line[mine], weights=trace.events.dur[rows[keep]][mine] + 1, minlength=len(sm.lines))
    return sm.lines[int(np.argmax(weight))].location()


def location_of_ops(trace: Trace, name: str) -> Location | None:
    """The location of the events with this exact name, e.g. an optimizer step or a DataLoader wait."""
    rows = np.flatnonzero(trace.names_where(lambda s: s == name))
    return location_of_rows(trace, rows)


def location_for_sync(trace: Trace, cause: SyncCause) -> Location | None:
    """The line behind a sync cause of the syncs analysis (same op and sync call), e.g. `loss.item()`."""
    sm = source_map(trace)
    if sm is None:
        return None
    rows = sync_rows(trace)
    rows = rows[trace.names_where(lambda s: s == cause.api)[rows]] if trace.has_device_events else rows
    if len(rows) == 0:
        return None
    anchor = sm.row_anchor[rows]
    names = np.array([trace.name_of(sm.anchors[a]) if a >= 0 else "" for a in anchor.tolist()], dtype=object)
    same_op = rows[names == cause.op]
    return location_of_rows(trace, same_op if len(same_op) else rows)
