"""Runtime calls put back on the thread of the op that made them: the host's launch cost is charged to ops (and a
step's launches told from its CPU work) by nesting on one thread, so a call written on another thread id (a tool
that wrote the tid as a string, or as 0) would leave every launch outside its op."""

from __future__ import annotations

import numpy as np

from stepscope.trace.model import NONE, Events, Kind


def runtime_on_op_threads(events: Events, notes: list[str]) -> Events:
    """The table with each runtime call that lies within the op of its external id (the op the profiler says made
    it), but on another thread, moved to that op's thread; a note says how many. Kineto gives both the op's id."""
    ext = events.external_id
    calls = np.flatnonzero((events.kind == Kind.RUNTIME) & (ext >= 0))
    ops = np.flatnonzero(events.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION) & (ext >= 0)
                         & (events.pid != NONE) & (events.tid != NONE))
    if not len(calls) or not len(ops):
        return events
    order = np.argsort(ext[ops], kind="stable")
    ids, rows = ext[ops][order], ops[order]
    pos = np.minimum(np.searchsorted(ids, ext[calls]), len(ids) - 1)
    op = rows[pos]
    moved = ((ids[pos] == ext[calls]) & ((events.tid[op] != events.tid[calls]) | (events.pid[op] != events.pid[calls]))
             & (events.start[op] <= events.start[calls]) & (events.end[calls] <= events.end[op]))
    if not moved.any():
        return events
    calls, op = calls[moved], op[moved]
    notes.append(f"{len(calls):,} runtime calls were recorded on another thread than the op that made them (the op "
                 "of their external id, which holds them in time): each is taken as on its op's thread")
    columns = {name: getattr(events, name) for name in events.__dataclass_fields__}
    for name in ("pid", "tid"):
        column = columns[name].copy()
        column[calls] = column[op]
        columns[name] = column
    return Events.from_columns(**columns)
