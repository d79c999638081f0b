"""The links the analyses follow, checked once by every reader: what is missing or broken becomes a note naming
the field and how many events, so that no figure changes without a word.

The analyses rely on: each GPU activity's correlation id naming the runtime call that launched it (the step's
end, the GPU's wait for the host, kernels by op and by line follow it), events' names (collectives and
syncs are known by name), host events' threads (nesting, syncs) and each event's duration and category.
Exact copies of an event (the same trace concatenated twice, a tool that wrote an event twice) are repaired:
counted once, and said so. A correlation id that is not one launch's (several runtime calls, or one call that
is not a graph launch with several GPU activities) links nothing: the launch it names cannot be told.
"""

from __future__ import annotations

import numpy as np

from stepscope.trace.model import GPU_ACTIVITY_KINDS, NONE, Events, Kind, distinct

HOST_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON, Kind.RUNTIME)
_FOLLOWS = ("their launch is unknown: the step ends, the GPU's wait for the host and the kernels by op and "
            "by line leave them out")
# Compared between a row and the one before it (the table is sorted by start, then longest first).
_IDENTITY = ("kind", "start", "dur", "pid", "tid", "device", "stream", "name", "correlation", "external_id")


def ambiguous_ids(events: Events, strings: tuple[str, ...]) -> np.ndarray:
    """The sorted correlation ids that name no single launch: held by several runtime calls, or by several GPU
    activities of a call that is not a graph launch (a CUDA graph's kernels all carry its launch's id)."""
    corr = events.correlation
    calls = (events.kind == Kind.RUNTIME) & (corr >= 0)
    ids, counts = np.unique(corr[calls], return_counts=True)
    shared = ids[counts > 1]
    gpu_ids, gpu_counts = np.unique(corr[events.of_kind(*GPU_ACTIVITY_KINDS) & (corr >= 0)], return_counts=True)
    many = gpu_ids[gpu_counts > 1]
    if len(many):  # np.isin with ids far apart builds a table over their range (ms), even for nothing to look up
        many = many[np.isin(many, ids)]  # an id no recorded call has links nothing anyway (link_notes counts those)
    if len(many):
        graph = [i for i, s in enumerate(strings) if "GraphLaunch" in s[:64]]
        graph_ids = corr[calls & np.isin(events.name, graph)] if graph else corr[:0]
        shared = np.union1d(shared, many[~np.isin(many, graph_ids)])
    return shared


def launch_pairs(events: Events, strings: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(GPU activity rows, the rows of the runtime calls that launched them): the join on correlation ids, each id
    naming one launch (CUPTI's ids are unique within the launching process, one trace file holds one process);
    ids that name no single launch are left out."""
    corr = events.correlation
    usable = corr >= 0
    if (bad := ambiguous_ids(events, strings)).size:
        usable &= ~np.isin(corr, bad)
    # Row numbers as int32 below 2**31 rows: half the memory of flatnonzero's (a join over millions of rows).
    index = np.int32 if len(corr) < 2**31 else np.int64
    runtime = np.flatnonzero((events.kind == Kind.RUNTIME) & usable).astype(index)
    gpu = np.flatnonzero(events.of_kind(*GPU_ACTIVITY_KINDS) & usable).astype(index)
    del usable
    if len(runtime) == 0 or len(gpu) == 0:
        return gpu[:0], runtime[:0]
    ids = corr[runtime]
    if not (ids[1:] >= ids[:-1]).all():  # the calls' ids usually rise with their start: no sort then
        order = np.argsort(ids, kind="stable")
        del ids
        runtime = runtime[order]
        del order
        ids = corr[runtime]
    wanted = corr[gpu]
    pos = np.searchsorted(ids, wanted)
    np.minimum(pos, len(ids) - 1, out=pos)
    hit = ids[pos] == wanted
    del wanted, ids
    return gpu[hit], runtime[pos[hit]]


def link_notes(events: Events, strings: tuple[str, ...]) -> list[str]:
    """A note per broken link: GPU activities without a launching call, events without a name or a thread."""
    notes = []
    gpu = events.of_kind(*GPU_ACTIVITY_KINDS)
    n_gpu = int(gpu.sum())
    if n_gpu and (bad := ambiguous_ids(events, strings)).size:
        shared = int((gpu & np.isin(events.correlation, bad)).sum())
        notes.append(f"{shared:,} of {n_gpu:,} GPU activities carry a correlation id that names no single launch "
                     f"(shared by several runtime calls, or by several activities of one call; {len(bad):,} such "
                     f"ids): their launch links cannot be trusted and are not followed: {_FOLLOWS}")
    if n_gpu:
        corr = events.correlation
        runtime = events.kind == Kind.RUNTIME
        no_id = int((gpu & (corr < 0)).sum())
        if no_id:
            notes.append(f"{no_id:,} of {n_gpu:,} GPU activities (kernels, copies, memsets) have no correlation id "
                         f"linking them to the runtime call that launched them: {_FOLLOWS}")
        linked = gpu & (corr >= 0)
        if runtime.any() and linked.any():
            known = distinct(corr[runtime & (corr >= 0)])
            ids = corr[linked]
            pos = np.minimum(np.searchsorted(known, ids), max(len(known) - 1, 0))
            orphans = int((known[pos] != ids).sum()) if len(known) else len(ids)
        else:
            orphans = int(linked.sum()) if not runtime.any() else 0
        if orphans:
            where = "no runtime call was recorded" if not runtime.any() else "no recorded runtime call has it"
            notes.append(f"{orphans:,} of {n_gpu:,} GPU activities have a correlation id but {where}: {_FOLLOWS}")
    unnamed = _unnamed(events, strings)
    if unnamed:
        notes.append(f"{unnamed:,} events have no name: they cannot be recognised as collectives, syncs, steps or "
                     "DataLoader waits, and count by their category alone")
    host = events.of_kind(*HOST_KINDS)
    threadless = int((host & ((events.pid == NONE) | (events.tid == NONE))).sum())  # real tids can be negative
    if threadless:
        notes.append(f"{threadless:,} host events have no process or thread id (pid, tid): they nest in no "
                     "other event of a thread")
    return notes


def _unnamed(events: Events, strings: tuple[str, ...]) -> int:
    empty = [i for i, s in enumerate(strings) if not s.strip()]
    return int(np.isin(events.name, empty).sum()) if empty else 0


def repeated_rows(events: Events) -> np.ndarray:
    """Rows that repeat the row before them in every field that identifies an event, ids included (an id is
    unique to one launch or op, so two rows with one id, one time and one name are one event written twice).
    Rows without any id are never taken as copies: in a µs-resolution trace two real ops can look alike."""
    n = len(events)
    if n < 2:
        return np.zeros(n, dtype=bool)
    same = np.ones(n - 1, dtype=bool)
    for name in _IDENTITY:
        column = getattr(events, name)
        same &= column[1:] == column[:-1]
        if not same.any():
            return np.zeros(n, dtype=bool)
    same &= (events.correlation[1:] >= 0) | (events.external_id[1:] >= 0)
    return np.concatenate([[False], same])


def without_repeats(events: Events, notes: list[str]) -> Events:
    """The table with each event written twice kept once, and a note saying how many were dropped."""
    repeats = repeated_rows(events)
    count = int(repeats.sum())
    if not count:
        return events
    notes.append(f"{count:,} events were exact copies of another (same time, name, thread and ids): each is "
                 "counted once")
    keep = ~repeats
    columns = {name: getattr(events, name)[keep] for name in events.__dataclass_fields__}
    return Events.from_columns(**columns)
