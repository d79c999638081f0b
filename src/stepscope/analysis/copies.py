"""Copies: HtoD, DtoH, DtoD (and peer) bytes, time and achieved bandwidth; pageable versus pinned."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.steps import Steps
from stepscope.trace.model import CopyKind, HostMemory, Kind, Trace, distinct


@dataclass(frozen=True)
class CopyStat:
    """The steps' copies in one direction, pageable and pinned."""

    direction: str  # "HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "other"
    count: int
    bytes: int
    total_ns: int
    pageable_count: int
    pageable_bytes: int
    pinned_count: int
    pinned_bytes: int

    @property
    def bandwidth_gb_s(self) -> float | None:
        return self.bytes / self.total_ns if self.total_ns > 0 and self.bytes > 0 else None  # bytes/ns = GB/s


@dataclass(frozen=True)
class CopySummary:
    """The steps' copies by direction, and the bytes sent to the device per step."""

    directions: tuple[CopyStat, ...]
    htod_bytes_per_step: np.ndarray
    pageable_htod_bytes_per_step: np.ndarray
    count_per_step: np.ndarray


_DIRECTIONS = {CopyKind.HTOD: "HtoD", CopyKind.DTOH: "DtoH", CopyKind.DTOD: "DtoD", CopyKind.HTOH: "HtoH",
               CopyKind.PTOP: "PtoP", CopyKind.OTHER: "other", CopyKind.NONE: "other"}


def copy_summary(trace: Trace, steps: Steps) -> CopySummary:
    ev = trace.events
    rows = np.flatnonzero(ev.kind == Kind.MEMCPY)
    step_of = steps.index_of(ev.start[rows])
    rows, step_of = rows[step_of >= 0], step_of[step_of >= 0]
    nbytes = np.maximum(ev.bytes[rows], 0)
    kinds, memory = ev.copy_kind[rows], ev.host_memory[rows]
    stats = []
    for kind in distinct(kinds):
        sel = kinds == kind
        pageable, pinned = sel & (memory == HostMemory.PAGEABLE), sel & (memory == HostMemory.PINNED)
        stats.append(
            CopyStat(
                direction=_DIRECTIONS[CopyKind(int(kind))], count=int(sel.sum()), bytes=int(nbytes[sel].sum()),
                total_ns=int(ev.dur[rows[sel]].sum()), pageable_count=int(pageable.sum()),
                pageable_bytes=int(nbytes[pageable].sum()), pinned_count=int(pinned.sum()),
                pinned_bytes=int(nbytes[pinned].sum()),
            )
        )
    htod = kinds == CopyKind.HTOD
    n = len(steps)
    return CopySummary(
        directions=tuple(sorted(stats, key=lambda s: -s.total_ns)),
        htod_bytes_per_step=np.bincount(step_of[htod], weights=nbytes[htod], minlength=n).astype(np.int64),
        pageable_htod_bytes_per_step=np.bincount(
            step_of[htod & (memory == HostMemory.PAGEABLE)], weights=nbytes[htod & (memory == HostMemory.PAGEABLE)],
            minlength=n,
        ).astype(np.int64),
        count_per_step=np.bincount(step_of, minlength=n),
    )
