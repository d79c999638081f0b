"""Runtime calls put back on the thread of the op that made them: the host's launch cost is charged to ops (and a
step's launches told from its CPU work) by nesting on one thread, so a call written on another thread id (a tool
that wrote the tid as a string, or as 0) would leave every launch outside its op."""

from __future__ import annotations

import numpy as np

from stepscope.trace.model import NONE, Events, Kind

_OPS = (Kind.CPU_OP, Kind.USER_ANNOTATION)
# Side threads make a few calls of their own (a watchdog's cudaEventQuery, a pin-memory thread's): calls on threads
# where no op ran are taken as misplaced only when they are most of the trace's calls.
LONE_SHARE = 0.5


def runtime_on_op_threads(events: Events, notes: list[str]) -> Events:
    """The table with misplaced runtime calls moved to their op's thread, and a note saying how many: by external
    id (Kineto gives a call its op's), else, when most calls lie on threads where no op ran, by time (the thread
    whose innermost op holds the call; the shortest such op when several threads have one)."""
    calls, op = _by_external_id(events)
    if len(calls):
        notes.append(f"{len(calls):,} runtime calls were recorded on another thread than the op that made them (the "
                     "op of their external id, which holds them in time): each is taken as on its op's thread")
        events = _moved(events, calls, op)
    calls, op, lone = _by_time(events)
    if len(calls):
        notes.append(f"{lone:,} of {int((events.kind == Kind.RUNTIME).sum()):,} runtime calls lie on threads where no "
                     f"op ran, and no external id names their op: {len(calls):,} are taken as on the thread whose "
                     "innermost op holds them in time, the rest stay where they are")
        events = _moved(events, calls, op)
    return events


def _by_external_id(events: Events) -> tuple[np.ndarray, np.ndarray]:
    """Calls whose external id is an op's that holds them in time on another thread, and those ops."""
    ext = events.external_id
    calls = np.flatnonzero((events.kind == Kind.RUNTIME) & (ext >= 0))
    ops = np.flatnonzero(events.of_kind(*_OPS) & (ext >= 0) & (events.pid != NONE) & (events.tid != NONE))
    if not len(calls) or not len(ops):
        return calls[:0], calls[:0]
    # (one copy of the ops' ids at a time: the copies were the 1 GB trace's read's peak)
    ids = ext[ops]
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    pos = np.minimum(np.searchsorted(ids, ext[calls]), len(ids) - 1)
    op = ops[order[pos]]
    ids = ids[pos]
    del order, ops
    moved = ((ids == ext[calls]) & ((events.tid[op] != events.tid[calls]) | (events.pid[op] != events.pid[calls]))
             & _holds(events, op, calls))
    return calls[moved], op[moved]


def _by_time(events: Events) -> tuple[np.ndarray, np.ndarray, int]:
    """When most runtime calls lie on threads where no op ran: those held in time by an op of another thread of their
    process, the innermost op holding each, and how many calls were on such threads."""
    runtime = np.flatnonzero(events.kind == Kind.RUNTIME)
    ops = np.flatnonzero(events.of_kind(*_OPS, Kind.PYTHON) & (events.tid != NONE))
    if not len(runtime) or not len(ops):
        return runtime[:0], runtime[:0], 0
    op_threads = _threads(events.pid[ops], events.tid[ops])
    on_op_thread = np.zeros(len(runtime), dtype=bool)
    for pid, tid in _threads(events.pid[runtime], events.tid[runtime]) & op_threads:
        on_op_thread |= (events.pid[runtime] == pid) & (events.tid[runtime] == tid)
    lone = runtime[~on_op_thread]
    if len(lone) <= LONE_SHARE * len(runtime):
        return runtime[:0], runtime[:0], 0
    best = np.full(len(lone), NONE, dtype=np.int64)
    for pid, tid in sorted(op_threads):
        same = np.flatnonzero(events.pid[lone] == pid)
        if not len(same):
            continue
        thread_ops = np.flatnonzero(events.of_kind(*_OPS) & (events.pid == pid) & (events.tid == tid))
        holder = _innermost_holders(events, thread_ops, lone[same])
        held = holder >= 0
        current = best[same]
        shorter = held & ((current < 0) | (events.dur[np.maximum(holder, 0)] < events.dur[np.maximum(current, 0)]))
        best[same[shorter]] = holder[shorter]
    found = best >= 0
    return lone[found], best[found], len(lone)


def _threads(pid: np.ndarray, tid: np.ndarray) -> set[tuple[int, int]]:
    """The distinct (pid, tid) pairs, told apart in numpy: a set of a tuple per row costs ms on a big trace. A run of
    rows of one thread (rows in time order mostly come in runs) is one row before the sort: the sort's copies of the
    rows were the 1 GB trace's read's peak."""
    if len(pid) > 1:
        first_of_run = np.ones(len(pid), dtype=bool)
        first_of_run[1:] = (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])
        pid, tid = pid[first_of_run], tid[first_of_run]
    order = np.lexsort((tid, pid))
    pid, tid = pid[order], tid[order]
    first = np.ones(len(pid), dtype=bool)
    first[1:] = (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])
    return set(zip(pid[first].tolist(), tid[first].tolist(), strict=True))


def _innermost_holders(events: Events, ops: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """For each call (rows sorted by start), the row of the innermost of `ops` (one thread's, sorted by start, nested
    as a thread's ops are) that holds it in time, else -1: one sweep with a stack of the open ops."""
    result = np.full(len(calls), NONE, dtype=np.int64)
    start, end = events.start, events.end
    stack: list[int] = []
    i = 0
    for k, call in enumerate(calls.tolist()):
        t = int(start[call])
        while i < len(ops) and start[ops[i]] <= t:
            while stack and end[stack[-1]] <= start[ops[i]]:
                stack.pop()
            stack.append(int(ops[i]))
            i += 1
        while stack and end[stack[-1]] < t:
            stack.pop()
        for op in reversed(stack):  # the deepest open op that also outlasts the call
            if end[op] >= end[call]:
                result[k] = op
                break
    return result


def _holds(events: Events, op: np.ndarray, calls: np.ndarray) -> np.ndarray:
    # the ends of these rows alone: `events.end` is a column of the whole table, made at each use (on the 1 GB
    # trace twice 23 MB at the reader's peak)
    start, dur = events.start, events.dur
    op_start, call_start = start[op], start[calls]
    return (op_start <= call_start) & (call_start + dur[calls] <= op_start + dur[op])


def _moved(events: Events, calls: np.ndarray, op: np.ndarray) -> Events:
    columns = {name: getattr(events, name) for name in events.__dataclass_fields__}
    for name in ("pid", "tid"):
        column = columns[name].copy()
        column[calls] = column[op]
        columns[name] = column
    return Events.from_columns(**columns)
