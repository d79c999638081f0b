"""The host-thread tables of an Nsight Systems export: CUDA API calls, OS runtime calls, NVTX ranges."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from stepscope.errors import StepscopeError
from stepscope.trace.model import NONE, Kind
from stepscope.trace.nsys.db import (
    DRIVER,
    INVALID_ID,
    NVTX,
    RUNTIME,
    Block,
    NsysDatabase,
    absent_if,
    pid_of,
)

NVTX_RANGE_TYPES = (59, 60, 70, 71)  # push/pop and start/end ranges, from NVTX and from NVTXT files
NVTX_DOMAIN_CREATE = 75
VERSION_SUFFIX = re.compile(r"_v\d+$")  # cudaLaunchKernel_v7000 -> cudaLaunchKernel


def host_block(kind: Kind, rows: np.ndarray, name: np.ndarray, correlation: np.ndarray | None = None) -> Block:
    """Rows of (start, end, globalTid, ...) on the host thread the global id names."""
    known = rows[:, 2] >= 0
    pid = np.where(known, (rows[:, 2] >> 24) & 0xFFFFFF, NONE)
    block = {
        "kind": np.full(len(rows), kind, dtype=np.int8), "start": rows[:, 0], "end": rows[:, 1],
        "pid": pid, "tid": np.where(known, rows[:, 2] & 0xFFFFFF, NONE), "name": name, "process": pid,
    }
    if correlation is not None:
        block["correlation"] = correlation
    return block


def runtime_calls(ex: NsysDatabase) -> Block | None:
    """CUDA runtime and driver API calls, each counted once."""
    parts = []
    for table in (RUNTIME, DRIVER):
        if table in ex.tables:
            # Packed like device rows: the thread's 48-bit id, and name id << 32 | correlation id.
            thread = f"coalesce({ex.column(table, 'globalTid', default='NULL')} & {(1 << 48) - 1}, -1)"
            corr = f"({ex.column(table, 'correlationId', default=str(INVALID_ID))} & {INVALID_ID})"
            fields = ["start", "end", thread, f"((nameId << 32) | {corr})"]
            parts.append(ex.ints(f"SELECT {', '.join(fields)} FROM {table}", len(fields), table))
    if not parts:
        return None
    rows = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if not (rows[:, 1] >= rows[:, 0]).all():
        backwards = int((rows[:, 1] < rows[:, 0]).sum())
        ex.notes.append(f"{backwards:,} of {len(rows):,} CUDA API calls end before they start (end < start): "
                        "left out, with the syncs and launches among them")
        rows = rows[rows[:, 1] >= rows[:, 0]]
    corr = absent_if(rows[:, 3] & INVALID_ID, INVALID_ID)
    lut, inverse = ex.name_lut(rows[:, 3] >> 32, clean=lambda s: VERSION_SUFFIX.sub("", s))
    name = lut[inverse]
    if len(np.unique(lut)) < len(lut):  # versioned and plain names of one call: older exports
        keep = _first_of_duplicates(rows[:, 0], rows[:, 1], rows[:, 2], corr, name)
        if len(keep) < len(rows):
            ex.notes.append(f"{len(rows) - len(keep)} CUDA API calls were recorded twice (versioned and "
                            "plain name): each is counted once")
            rows, name, corr = rows[keep], name[keep], corr[keep]
    return host_block(Kind.RUNTIME, rows, name, correlation=corr)


def host_calls(ex: NsysDatabase, table: str) -> Block | None:
    """OS runtime calls or profiler overhead on host threads, as OTHER events."""
    if table not in ex.tables:
        return None
    fields = ["start", "end", ex.column(table, "globalTid"), "nameId"]
    rows = ex.ints(f"SELECT {', '.join(fields)} FROM {table}", len(fields), table)
    rows = rows[rows[:, 1] > rows[:, 0]]  # zero-length rows are markers ("profiling started")
    return host_block(Kind.OTHER, rows, ex.names(rows[:, 3]))


def nvtx_ranges(ex: NsysDatabase) -> Block | None:
    """NVTX push/pop and start/end ranges as user annotations on the thread that opened them."""
    if NVTX not in ex.tables:
        return None
    has_ids = "textId" in ex.columns(NVTX) and "StringIds" in ex.tables
    text = "coalesce(n.text, s.value, '')" if has_ids else "coalesce(n.text, '')"
    join = "LEFT JOIN StringIds AS s ON s.id = n.textId" if has_ids else ""
    domain = "coalesce(n.domainId, 0)" if "domainId" in ex.columns(NVTX) else "0"
    sql = (f"SELECT n.start, coalesce(n.end, -1), coalesce(n.globalTid, -1), {domain}, {text} "
           f"FROM {NVTX} AS n {join} WHERE n.eventType IN ({', '.join(map(str, NVTX_RANGE_TYPES))})")
    fetched = ex.execute(sql).fetchall()
    if not fetched:
        return None
    starts, ends, tids, domains, texts = zip(*fetched, strict=True)
    try:
        rows = np.array([starts, ends, tids, domains], dtype=np.int64).T
    except (TypeError, ValueError, OverflowError):
        raise StepscopeError(f"{ex.path}: {NVTX} holds values that are not integers") from None
    name = np.fromiter(map(ex.intern, texts), dtype=np.int32, count=len(texts))
    valid = (rows[:, 1] >= rows[:, 0]) | (rows[:, 1] < 0)  # negative: still open, closed at the trace end
    rows, name = rows[valid], name[valid]
    _domain_note(ex, rows, f"SELECT coalesce(n.globalTid, -1), {domain}, {text} FROM {NVTX} AS n {join} "
                           f"WHERE n.eventType = {NVTX_DOMAIN_CREATE}")
    return host_block(Kind.USER_ANNOTATION, rows, name)


def _domain_note(ex: NsysDatabase, rows: np.ndarray, sql: str) -> None:
    """Say which NVTX domains the ranges came from; names stay plain so `--step-range NAME` matches."""
    in_domain = rows[:, 3] != 0
    if not in_domain.any():
        return
    names = {(pid_of(g), int(d)): text for g, d, text in ex.execute(sql)}
    counts = Counter(names.get((pid_of(int(g)), int(d)), f"domain {int(d)}")
                     for g, d in rows[in_domain][:, 2:4].tolist())
    listed = ", ".join(f"{n} ({c})" for n, c in counts.most_common())
    ex.notes.append(f"NVTX ranges from named domains: {listed}; range names are shown without their domain")


def _first_of_duplicates(start: np.ndarray, end: np.ndarray, thread: np.ndarray, corr: np.ndarray,
                         name: np.ndarray) -> np.ndarray:
    """Row indices to keep: of calls with the same thread, correlation id and name, only the longest.

    Older exports write each CUDA API call twice, under its versioned and its plain name; the plain
    row encloses the versioned one. Calls without a correlation id are always kept.
    """
    linked = np.flatnonzero(corr >= 0)
    order = linked[np.lexsort((start[linked] - end[linked], name[linked], corr[linked], thread[linked]))]
    same = ((thread[order[1:]] == thread[order[:-1]]) & (corr[order[1:]] == corr[order[:-1]])
            & (name[order[1:]] == name[order[:-1]]))
    keep = np.ones(len(start), dtype=bool)
    keep[order[1:][same]] = False
    return np.flatnonzero(keep)
