"""One rank's collectives: when it issued each, when it arrived, when it finished, and the key that names the
same collective on every rank.

A collective is a group of collective kernels launched from one outermost collective op (`c10d::*`,
`record_param_comms`, `nccl:*`) on one host thread; on a rank without collective kernels (gloo on CPU) it is
one outermost backend range (`gloo:*`), which the backend's worker thread records while it runs it.
Arrival is the start of the kernels (or of the range): a rank that arrives early waits inside it.

The key is (process group, Seq) when the trace records them (PyTorch's `record_param_comms` args);
otherwise (step, group, normalised name, index among those), since every rank of a group must issue its
collectives in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.categories import COLLECTIVE_LAUNCHER, COLLECTIVE_OP, category_masks
from stepscope.analysis.hostops import host_threads, outermost
from stepscope.analysis.launches import launching_call
from stepscope.analysis.steps import Steps
from stepscope.trace.collective_args import CollectiveArgs
from stepscope.trace.model import Kind, Trace

_PREFIXES = ("nccl:", "gloo:", "rccl:", "hccl:", "mpi:", "ucc:", "c10d::")
_NO_ARGS = CollectiveArgs()


@dataclass(frozen=True)
class Found:
    """The collectives of one rank before lead-in windows are measured, in start order."""

    keys: list[str]
    names: list[str]
    groups: list[str]
    seq: np.ndarray
    bytes: np.ndarray
    issued: np.ndarray
    start: np.ndarray
    end: np.ndarray
    step: np.ndarray
    on_device: bool


def display_name(raw: str) -> str:
    """`nccl:all_reduce` -> `all_reduce`, `c10d::allreduce_` -> `allreduce`."""
    for prefix in _PREFIXES:
        if raw.startswith(prefix):
            return raw[len(prefix):].rstrip("_") or raw
    return raw


def _normalised(name: str) -> str:
    return display_name(name).replace("_", "").lower()


def find_collectives(trace: Trace, steps: Steps, args: dict[tuple[int, str], CollectiveArgs]) -> Found:
    """This rank's collectives: kernel groups on a GPU rank, backend ranges on a CPU-only one."""
    ev = trace.events
    host = ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION)
    launchers = np.flatnonzero(host & trace.names_where(lambda s: COLLECTIVE_LAUNCHER.match(s) is not None))
    kernels = np.flatnonzero(category_masks(trace, steps.source)["communication"] & (ev.kind == Kind.KERNEL))
    if len(kernels):
        found = _device_collectives(trace, kernels, launchers, args)
    else:
        backend = np.flatnonzero(host & trace.names_where(lambda s: COLLECTIVE_OP.match(s) is not None))
        found = _finished([_collective(trace, [r], r, [r], args) for r in outermost(trace, backend).tolist()],
                          trace, steps)
    found.sort(key=lambda c: (c.issued, c.start))  # program order: what order-based keys count
    return _with_keys(found, steps, on_device=bool(len(kernels)))


def _finished(found: list[_Collective], trace: Trace, steps: Steps) -> list[_Collective]:
    """Leave out a backend range still open when the profiler stopped: its end is the cut, not its own. It ends
    at the trace's end, or after the last step (gloo closes the last step's range only as the profiler stops).
    Kernels need no such care: the GPU records them whole."""
    trace_end = int(trace.events.end.max()) if len(trace.events) else 0
    last_step_end = int(steps.end[-1]) if len(steps) else trace_end
    return [c for c in found if c.end < trace_end and c.end <= last_step_end]


@dataclass(frozen=True)
class _Collective:
    issued: int
    start: int
    end: int
    name: str
    args: CollectiveArgs


def _collective(trace: Trace, kernel_rows: list[int], issuing_row: int, host_rows: list[int],
                args: dict[tuple[int, str], CollectiveArgs]) -> _Collective:
    """One collective from its kernels (or backend range) and the host ops that issued it."""
    ev = trace.events
    found = _NO_ARGS
    name = ""
    for row in [*host_rows, *kernel_rows]:  # outermost first; a backend range (nccl:*, gloo:*) names it
        raw = trace.name_of(row)
        if found is _NO_ARGS:
            found = args.get((int(ev.start[row]), raw), _NO_ARGS)
        if COLLECTIVE_OP.match(raw) or (not name and raw != "record_param_comms"):
            name = display_name(raw)
    return _Collective(issued=int(ev.start[issuing_row]), start=int(ev.start[kernel_rows].min()),
                       end=int(ev.end[kernel_rows].max()), name=found.collective or name, args=found)


def _device_collectives(trace: Trace, kernels: np.ndarray, launchers: np.ndarray,
                        args: dict[tuple[int, str], CollectiveArgs]) -> list[_Collective]:
    """Group collective kernels by the outermost collective op inside which their launch call ran."""
    outer = outermost(trace, launchers)
    launch = launching_call(trace)[kernels]
    owner = np.full(len(kernels), -1, dtype=np.int64)
    has_launch = launch >= 0
    owner[has_launch] = _enclosing(trace, outer, launch[has_launch])
    host_owner = _enclosing(trace, outer, launchers)
    found = [
        _collective(trace, kernels[owner == o].tolist(), int(outer[o]), launchers[host_owner == o].tolist(), args)
        for o in np.unique(owner[owner >= 0]).tolist()
    ]
    for k, lr in zip(kernels[owner < 0].tolist(), launch[owner < 0].tolist(), strict=True):
        found.append(_collective(trace, [k], lr if lr >= 0 else k, [], args))
    return found


def _enclosing(trace: Trace, outer: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each host row, the index into `outer` (disjoint on each thread) of the op it starts inside, else -1."""
    result = np.full(len(rows), -1, dtype=np.int64)
    if len(outer) == 0 or len(rows) == 0:
        return result
    ev = trace.events
    threads = host_threads(trace)
    starts = threads.shift(outer, ev.start[outer])
    order = np.argsort(starts, kind="stable")
    ends = threads.shift(outer, ev.end[outer])[order]
    t = threads.shift(rows, ev.start[rows])
    k = np.searchsorted(starts[order], t, side="right") - 1
    hit = (k >= 0) & (threads.thread[rows] >= 0)
    hit[hit] &= ends[k[hit]] >= t[hit]
    result[hit] = order[k[hit]]
    return result


def _with_keys(found: list[_Collective], steps: Steps, on_device: bool) -> Found:
    """Keys in program order, then every column sorted by arrival."""
    issued = np.array([c.issued for c in found], dtype=np.int64)
    step = np.searchsorted(steps.start, issued, side="right").astype(np.int32) - 1
    inside = step >= 0
    inside[inside] &= issued[inside] < steps.end[step[inside]]
    step[~inside] = -1
    keys = []
    counters: dict[tuple[str, str, str], int] = {}
    for c, s in zip(found, step.tolist(), strict=True):
        if c.args.seq is not None and c.args.group is not None:
            keys.append(f"seq|{c.args.group}|{c.args.seq}")
            continue
        where = (steps.ids[s] if s >= 0 else "-", c.args.group or "", _normalised(c.name))
        counters[where] = index = counters.get(where, -1) + 1
        keys.append(f"order|{where[0]}|{where[1]}|{where[2]}|{index}")
    start = np.array([c.start for c in found], dtype=np.int64)
    order = np.argsort(start, kind="stable")
    pick = order.tolist()
    return Found(
        keys=[keys[i] for i in pick], names=[found[i].name for i in pick],
        groups=[found[i].args.group or "" for i in pick],
        seq=np.array([found[i].args.seq if found[i].args.seq is not None else -1 for i in pick], dtype=np.int64),
        bytes=np.array([found[i].args.bytes if found[i].args.bytes is not None else -1 for i in pick],
                       dtype=np.int64),
        issued=issued[order], start=start[order],
        end=np.array([found[i].end for i in pick], dtype=np.int64), step=step[order], on_device=on_device,
    )
