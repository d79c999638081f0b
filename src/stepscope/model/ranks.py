"""The report's cross-rank rows (stepscope.report/1): one row per rank, the collectives matched across ranks,
the straggler and its cause, the files that failed. `CrossRank` and `RankDiagnosis`, which hold report
patterns, stay beside the Report (model/report.py). Fields are added, never renamed or removed, within the
schema version; see docs/distributed.md."""

from __future__ import annotations

import msgspec

from stepscope.model.kinds import PatternId


class Struct(msgspec.Struct, kw_only=True, omit_defaults=False, frozen=True):
    pass


class RankRow(Struct, kw_only=True):
    rank: int | None
    path: str
    step_time_us: float | None
    breakdown_us: dict[str, float]
    gpu_utilization: float | None
    primary_pattern: PatternId | None = None
    # Cross-rank figures (docs/distributed.md). Per step: over the steps in which it shares a collective (waits);
    # over its profiled steps (communication, exposed communication).
    collectives: int = 0  # collectives it shares with another rank
    arrived_last_share: float | None = None  # share of them it arrived last at
    wait_us: float | None = None  # per step: its time in collectives beyond the fastest rank's
    wait_caused_us: float | None = None  # per step: the others' waiting at collectives it arrived last at, summed
    own_time_us: float | None = None  # per step: step time less its wait
    communication_us: float | None = None  # per step: union of its collectives
    exposed_communication_us: float | None = None  # per step: communication no compute overlaps
    overlap_ratio: float | None = None  # hidden communication / communication
    clock_offset_us: float | None = None  # subtracted from its times to line up with the others
    step_times_us: list[float | None] = msgspec.field(default_factory=list)  # by CrossRank.step_ids
    step_wait_us: list[float | None] = msgspec.field(default_factory=list)  # by CrossRank.step_ids


class CollectiveRow(Struct, kw_only=True):
    """One collective matched across ranks."""

    name: str
    group: str  # process group name, "" when the traces do not say
    seq: int | None  # the group's sequence number, when the traces record it
    step: str | None  # the step that issued it (on the rank that first had it)
    bytes: int | None
    ranks: int
    arrival_skew_us: float  # last arrival minus first, clocks aligned
    last_rank: int | None
    max_wait_us: float
    mean_wait_us: float


class StragglerCause(Struct, kw_only=True):
    category: str  # a step-breakdown category, or "sync" (host-device syncs, split from runtime)
    label: str
    straggler_us: float  # in its lead-ins to the collectives it arrived last at
    median_us: float  # the median rank's, in its lead-ins to the same collectives
    ratio: float | None  # straggler / median (None when the median rank had none)


class Straggler(Struct, kw_only=True):
    rank: int | None
    path: str
    median_rank: int | None  # the yardstick: the median of the other ranks by own time per step
    arrived_last_share: float
    late_collectives: int
    collectives: int
    wait_caused_per_rank_us: float  # per step: what each other rank waited for it
    cause: StragglerCause | None
    lead_in_us: dict[str, float]  # its lead-ins to its late collectives, by category
    median_lead_in_us: dict[str, float]  # the median rank's, to the same collectives
    statement: str  # the finding in one sentence


class RankFailure(Struct, kw_only=True):
    path: str
    error: str
