"""The forward lines that hold the most activation memory at the peak: each activation block is charged to
the op that allocated it, and the op to the user's line (as the lines analysis charges time)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.hostops import host_threads
from stepscope.analysis.nesting import innermost, parents
from stepscope.analysis.source_map import SourceLine, source_map
from stepscope.trace.model import Kind, Trace, start_order

TOP_LINES = 10


@dataclass(frozen=True)
class LineMemory:
    """Memory at the peak a user line allocated, and the op that did."""

    line: SourceLine | None  # None: the op that made it has no user line
    op: str  # the op that allocated the most of it
    bytes: int


def _thread_of_samples(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The host-thread index (as host_threads numbers them) of memory samples, -1 for unknown threads."""
    ev, mem = trace.events, trace.memory
    threads = host_threads(trace)
    host = np.flatnonzero(threads.thread >= 0)
    table = {(int(p), int(t)): int(i) for p, t, i in zip(ev.pid[host], ev.tid[host], threads.thread[host],
                                                           strict=True)}
    return np.array([table.get((int(mem.pid[r]), int(mem.tid[r])), -1) for r in rows.tolist()], dtype=np.int64)


def allocating_ops(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """For memory samples, the innermost CPU op on their thread at their time, else -1."""
    ev = trace.events
    found = np.full(len(rows), -1, dtype=np.int64)
    ops = np.flatnonzero(ev.kind == Kind.CPU_OP)
    if len(rows) == 0 or len(ops) == 0:
        return found
    threads = host_threads(trace)
    thread = _thread_of_samples(trace, rows)
    known = thread >= 0
    s, e = threads.shift(ops, ev.start[ops]), threads.shift(ops, ev.end[ops])
    order = start_order(s, e - s)
    s, e, ops = s[order], e[order], ops[order]
    q = thread[known] * threads.span + trace.memory.time[rows[known]]
    hit = innermost(s, e, parents(s, e), q, q)
    found[np.flatnonzero(known)[hit >= 0]] = ops[hit[hit >= 0]]
    return found


def activation_lines(trace: Trace, rows: np.ndarray) -> tuple[LineMemory, ...]:
    """Activation bytes by the user line whose op allocated them, most first (needs source information)."""
    sm = source_map(trace)
    if sm is None or len(rows) == 0:
        return ()
    ops = allocating_ops(trace, rows)
    sizes = trace.memory.bytes[rows]
    by_line: dict[int, dict[str, int]] = {}
    for op, size in zip(ops.tolist(), sizes.tolist(), strict=True):
        anchor = sm.row_anchor[op] if op >= 0 else -1
        line = int(sm.line[anchor]) if anchor >= 0 else -1
        name = trace.name_of(op) if op >= 0 else "(no op)"
        by_line.setdefault(line, {})
        by_line[line][name] = by_line[line].get(name, 0) + int(size)
    found = [LineMemory(sm.lines[line] if line >= 0 else None, max(ops_, key=ops_.__getitem__), sum(ops_.values()))
             for line, ops_ in by_line.items()]
    found.sort(key=lambda m: -m.bytes)
    return tuple(found[:TOP_LINES])
