"""Host-to-device copies as the copy fixes see them: which recur in every step (the same size from the same line),
which the host waits for (a synchronous copy, or a sync right after it), and the source dtype where the trace
recorded it (record_shapes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.costs import EPISODE_GAP_NS
from stepscope.analysis.launches import launching_call
from stepscope.analysis.nesting import innermost, parents
from stepscope.analysis.source_map import source_map
from stepscope.analysis.steps import Steps
from stepscope.analysis.syncs import is_sync_api
from stepscope.trace.model import CopyKind, HostMemory, Kind, Trace, distinct

# The profiler's names for the float32 dtype in "Input type".
FLOAT32 = frozenset({"float", "Float", "float32"})


@dataclass(frozen=True)
class CopyGroups:
    """The steps' host-to-device copies (rows, sorted) and what the copy fixes ask of them."""

    rows: np.ndarray  # HtoD copies inside the steps
    step: np.ndarray  # per copy, its step's index
    line: np.ndarray  # per copy, the source map's line index of its launch (-1: unknown)
    recurring: np.ndarray  # per copy: its (line, size) comes the same number of times in every step
    waits: np.ndarray  # per copy, the host call that waits for it (the copy's own call when synchronous, else a
    # sync right after it on the same thread), -1 for none
    dtype: list[str | None]  # per copy, its source tensor's recorded dtype


def copy_groups(trace: Trace, steps: Steps) -> CopyGroups:
    """The steps' HtoD copies with their groups, their waits and their dtypes (found once per trace and steps)."""
    return trace.derived(("copy_groups", steps.start.tobytes(), steps.end.tobytes()),
                         lambda: _copy_groups(trace, steps))


def _copy_groups(trace: Trace, steps: Steps) -> CopyGroups:
    ev = trace.events
    rows = np.flatnonzero((ev.kind == Kind.MEMCPY) & (ev.copy_kind == CopyKind.HTOD) & (ev.bytes > 0))
    calls = launching_call(trace)[rows]
    # A copy belongs to the step whose host range launched it (steps.index_of: a deep queue runs behind the host).
    step = np.where(calls >= 0, steps.index_of(ev.start[np.maximum(calls, 0)], host=True),
                    steps.index_of(ev.start[rows])) if len(steps) else np.full(len(rows), -1)
    rows, step, calls = rows[step >= 0], step[step >= 0], calls[step >= 0]
    sm = source_map(trace)
    line = np.full(len(rows), -1, dtype=np.int64)
    if sm is not None and len(rows):
        anchor = sm.row_anchor[rows]
        line[anchor >= 0] = sm.line[anchor[anchor >= 0]]
    return CopyGroups(rows=rows, step=step, line=line, recurring=_recurring(ev.bytes[rows], line, step, len(steps)),
                      waits=_waits(trace, calls), dtype=_dtypes(trace, calls))


def _recurring(nbytes: np.ndarray, line: np.ndarray, step: np.ndarray, n_steps: int) -> np.ndarray:
    """Per copy, whether its (line, size) comes equally often in every step, over at least two steps."""
    out = np.zeros(len(nbytes), dtype=bool)
    if n_steps < 2 or len(nbytes) == 0:
        return out
    keys = np.stack([line, nbytes.astype(np.int64)], axis=1)
    _, group = np.unique(keys, axis=0, return_inverse=True)
    group = group.reshape(-1)
    counts = np.zeros((int(group.max()) + 1, n_steps), dtype=np.int64)
    np.add.at(counts, (group, step), 1)
    steady = (counts.min(axis=1) > 0) & (counts.min(axis=1) == counts.max(axis=1))
    out[:] = steady[group]
    return out


def _by_thread(trace: Trace, calls: np.ndarray, among: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The linked calls (-1: none) thread by thread: per thread, their indices into `calls` and the rows of `among`
    on that thread."""
    ev = trace.events
    at_call = np.maximum(calls, 0)
    out = []
    for pid, tid in sorted({(int(ev.pid[c]), int(ev.tid[c])) for c in calls[calls >= 0]}):
        at = np.flatnonzero((calls >= 0) & (ev.pid[at_call] == pid) & (ev.tid[at_call] == tid))
        out.append((at, among[(ev.pid[among] == pid) & (ev.tid[among] == tid)]))
    return out


def _waits(trace: Trace, calls: np.ndarray) -> np.ndarray:
    """Per copy's launching call, the host call that waits for the copy: the call itself when it is synchronous
    (cudaMemcpy), else the next runtime call on its thread when it is a sync that begins within EPISODE_GAP_NS."""
    ev = trace.events
    out = np.full(len(calls), -1, dtype=np.int64)
    sync = trace.names_where(is_sync_api)
    own = (calls >= 0) & sync[np.maximum(calls, 0)]
    out[own] = calls[own]
    runtime = np.flatnonzero(ev.kind == Kind.RUNTIME)
    for at, mine in _by_thread(trace, np.where(own, -1, calls), runtime):
        k = np.searchsorted(ev.start[mine], ev.end[calls[at]], side="left")
        nxt = mine[np.minimum(k, len(mine) - 1)]
        ok = (k < len(mine)) & sync[nxt] & (ev.start[nxt] - ev.end[calls[at]] <= EPISODE_GAP_NS)
        out[at[ok]] = nxt[ok]
    return out


def _dtypes(trace: Trace, calls: np.ndarray) -> list[str | None]:
    """Per copy's launching call, the first input's dtype of the innermost enclosing op that recorded inputs
    (aten::copy_, aten::_to_copy, aten::to), else None."""
    ev = trace.events
    out: list[str | None] = [None] * len(calls)
    ops = np.flatnonzero((ev.kind == Kind.CPU_OP) & (ev.inputs >= 0)) if len(trace.op_inputs) else np.zeros(0, int)
    for at, mine in _by_thread(trace, calls, ops):
        if len(mine) == 0:
            continue
        start, end = ev.start[mine], ev.end[mine]
        found = innermost(start, end, parents(start, end), ev.start[calls[at]], ev.end[calls[at]])
        for i, f in zip(at.tolist(), found.tolist(), strict=True):
            inputs = trace.inputs_of(int(mine[f])) if f >= 0 else None
            types = inputs.types if inputs is not None else ()
            out[i] = str(types[0]) if types and types[0] else None
    return out


def pinned(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Which copies come from pinned host memory."""
    return trace.events.host_memory[rows] == HostMemory.PINNED


def compute_streams(trace: Trace) -> np.ndarray:
    """The streams that run kernels."""
    ev = trace.events
    return distinct(ev.stream[ev.kind == Kind.KERNEL])
