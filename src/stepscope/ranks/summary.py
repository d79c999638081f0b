"""What one rank's task hands back to the driver: a few arrays per step and per collective, never the trace."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.categories import BREAKDOWN_CATEGORIES

# The lead-in to a collective (what a rank did since its previous collective ended) split like the step
# breakdown, with host-device syncs taken out of the runtime calls: a sync is a cause of its own.
LEAD_IN_CATEGORIES = (*BREAKDOWN_CATEGORIES[:5], "sync", *BREAKDOWN_CATEGORIES[5:])


@dataclass(frozen=True, eq=False)
class RankCollectives:
    """One row per collective this rank took part in, sorted by when it started; times in ns on the rank's own
    clock (from its trace's origin)."""

    keys: tuple[str, ...]  # what identifies the same collective on every rank: (group, seq) or order
    names: tuple[str, ...]  # as the trace names it, prefix dropped: "all_reduce", "allreduce", ...
    groups: tuple[str, ...]  # process group name, "" when the trace does not say
    seq: np.ndarray  # int64, -1 when the trace does not say
    bytes: np.ndarray  # int64 input message size, -1 when unknown
    issued: np.ndarray  # int64: when the host called it
    start: np.ndarray  # int64: when this rank arrived (its collective kernel, or the backend's range, began)
    end: np.ndarray  # int64: when it finished
    step: np.ndarray  # int32 index into the rank's steps, -1 outside them
    lead_in: np.ndarray  # (collectives, LEAD_IN_CATEGORIES) int64 ns
    on_device: bool  # collectives are GPU kernels (else host ranges, e.g. gloo)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def matched_by_seq(self) -> np.ndarray:
        return self.seq >= 0


@dataclass(frozen=True, eq=False)
class RankSummary:
    path: str
    rank: int | None
    world_size: int | None
    format: str
    origin_us: float  # the trace's own timestamp of t=0: ranks on one clock line up through it
    step_ids: tuple[str, ...]
    step_start: np.ndarray  # int64 ns from the origin
    step_duration: np.ndarray  # int64 ns
    breakdown: np.ndarray  # (steps, BREAKDOWN_CATEGORIES) int64 ns, as the single-rank report
    compute: np.ndarray  # per step, ns: union of compute (GPU activity; host ops on a CPU-only rank)
    communication: np.ndarray  # per step, ns: union of this rank's collectives
    exposed_communication: np.ndarray  # per step, ns: communication not overlapped by compute
    idle: np.ndarray  # per step, ns: neither
    gpu_utilization: float | None
    patterns: tuple[str, ...]  # the rank's verdict, primary first
    collectives: RankCollectives
    notes: tuple[str, ...] = ()

    @property
    def step_time_ns(self) -> float | None:
        return float(self.step_duration.mean()) if len(self.step_duration) else None


@dataclass(frozen=True)
class RankFailure:
    """A rank file that could not be analysed, and why (one line)."""

    path: str
    error: str
