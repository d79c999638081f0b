"""Host-device synchronisation: each blocking API call, its count and time per step, and the op that made it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from stepscope.analysis.hostops import enclosing_ops
from stepscope.analysis.steps import Steps
from stepscope.trace.model import Kind, Trace, distinct

# Calls that block the host until the device catches up. Synchronous memcpys (no "Async") block too.
SYNC_API = re.compile(
    r"^(cuda|hip)(StreamSynchronize|DeviceSynchronize|EventSynchronize|ThreadSynchronize)$"
    r"|^(cuda|hip)Memcpy(2D|3D)?(ToSymbol|FromSymbol|WithStream)?$"
    r"|^cu(CtxSynchronize|StreamSynchronize|EventSynchronize)$"
    r"|^cuMemcpy(DtoH|HtoD|DtoD)?(_v2)?$"
)


def is_sync_api(name: str) -> bool:
    return SYNC_API.match(name) is not None


@dataclass(frozen=True)
class SyncApiStat:
    """One synchronising API's calls and time, per step."""

    api: str
    count_per_step: np.ndarray
    time_per_step: np.ndarray  # ns


@dataclass(frozen=True)
class SyncCause:
    """One host op that synchronised, e.g. aten::item -> aten::_local_scalar_dense -> cudaStreamSynchronize."""

    op: str  # the outermost op around the sync call on its thread (what the user's code called)
    inner_op: str  # the innermost op, closest to the sync call
    api: str
    count: int
    total_ns: int


@dataclass(frozen=True)
class SyncSummary:
    """The host's synchronisations in the steps: per API, and the ops that caused them."""

    apis: tuple[SyncApiStat, ...]
    causes: tuple[SyncCause, ...]
    rows: np.ndarray  # the sync calls inside the steps, for later analyses (e.g. copy then sync)

    def count_per_step(self, n: int) -> np.ndarray:
        return sum((a.count_per_step for a in self.apis), np.zeros(n, dtype=np.int64))

    def time_per_step(self, n: int) -> np.ndarray:
        return sum((a.time_per_step for a in self.apis), np.zeros(n, dtype=np.int64))


def sync_summary(trace: Trace, steps: Steps) -> SyncSummary:
    ev = trace.events
    rows = np.flatnonzero((ev.kind == Kind.RUNTIME) & trace.names_where(is_sync_api))
    step_of = steps.index_of(ev.start[rows], host=True)
    rows, step_of = rows[step_of >= 0], step_of[step_of >= 0]
    apis = []
    for name_id in distinct(ev.name[rows]):
        sel = ev.name[rows] == name_id
        apis.append(
            SyncApiStat(
                api=trace.strings[name_id],
                count_per_step=np.bincount(step_of[sel], minlength=len(steps)),
                time_per_step=np.bincount(step_of[sel], weights=ev.dur[rows[sel]], minlength=len(steps)).astype(
                    np.int64
                ),
            )
        )
    apis.sort(key=lambda a: -int(a.time_per_step.sum()))
    return SyncSummary(tuple(apis), _causes(trace, rows), rows)


def _causes(trace: Trace, sync_rows: np.ndarray) -> tuple[SyncCause, ...]:
    """Group the sync calls by the ops that enclose them on their thread."""
    ev = trace.events
    groups: dict[tuple[str, str, str], list[int]] = {}
    for row, (outer, inner) in zip(sync_rows.tolist(), enclosing_ops(trace, sync_rows), strict=True):
        groups.setdefault((outer, inner, trace.name_of(row)), []).append(int(row))
    causes = [
        SyncCause(op=o, inner_op=i, api=a, count=len(r), total_ns=int(ev.dur[r].sum()))
        for (o, i, a), r in groups.items()
    ]
    causes.sort(key=lambda c: -c.total_ns)
    return tuple(causes)
