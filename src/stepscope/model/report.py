"""The Report: one typed object the pipeline builds and every renderer reads; it round-trips through
JSON as `stepscope.report/1`. Fields are added, never renamed or removed, within a schema version."""

from __future__ import annotations

from typing import Any

import msgspec

from stepscope.model.batches import BatchSizes
from stepscope.model.kinds import (
    Accelerator,
    CopyDirection,
    DeviceKind,
    DiagnosisRole,
    Fitted,
    FixId,
    Granularity,
    Location,
    MatchedBy,
    PatternId,
    SourceFormat,
    SourceKind,
    TimelineRowKind,
)
from stepscope.model.meter import Meter, MeterPhase, MeterWorkers  # noqa: F401 - part of the Report's namespace
from stepscope.model.noise import StepNoise
from stepscope.model.prediction import Prediction, PredictionOrigin, PredictionTarget  # noqa: F401
from stepscope.model.ranks import CollectiveRow, RankFailure, RankRow, Straggler, StragglerCause  # noqa: F401
from stepscope.model.run import (  # noqa: F401 - part of the Report's namespace
    LoaderSettings,
    OptimizerSettings,
    OverheadCorrection,
    Reference,
    Replay,
    Run,
    Settings,
    StepEnergy,
)
from stepscope.model.usage import MemoryUsage, Utilization

SCHEMA = "stepscope.report/1"


class Struct(msgspec.Struct, kw_only=True, omit_defaults=False, frozen=True):
    pass


class Source(Struct, kw_only=True):
    paths: list[str]
    format: SourceFormat


class Device(Struct, kw_only=True):
    name: str
    kind: DeviceKind
    id: int | None = None
    compute_capability: str | None = None
    total_memory_bytes: int | None = None
    sm_count: int | None = None
    count: int = 1  # devices of this kind the trace describes


class StepRow(Struct, kw_only=True):
    id: str
    duration_us: float
    breakdown_us: dict[str, float]
    gpu_utilization: float | None
    kernel_count: int = 0
    sync_count: int = 0
    sync_us: float = 0.0
    htod_bytes: int = 0


class Summary(Struct, kw_only=True):
    step_time_us: float | None
    breakdown_us: dict[str, float]
    gpu_utilization: float | None
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    step_count: int = 0
    step_source: str = ""
    dropped_steps: list[str] = msgspec.field(default_factory=list)
    # A live capture's headline (step_time_us, steps_per_s, samples_per_s) is its unprofiled step; the steps table's
    # mean (the replayed, or recorded, timeline) is then this:
    timeline_step_time_us: float | None = None
    # The samples per step behind samples_per_s (and the prediction's cost per sample), and where they come from:
    # "given" (--batch-size, the API, the run's capture) or "inferred from the trace" (its recorded shapes).
    batch_size: int | None = None
    batch_size_source: str | None = None
    noise: StepNoise | None = None  # the headline's noise: None under stats.MIN_STEPS steps (one-step captures)


class DeviceIdle(Struct, kw_only=True):
    device: int
    utilization: float
    busy_us_per_step: float
    idle_us_per_step: dict[str, float]  # host_wait, kernel_wait, other


class Gpu(Struct, kw_only=True):
    devices: list[DeviceIdle]


class KernelRow(Struct, kw_only=True):
    name: str
    count: int
    total_us: float
    mean_us: float
    share: float
    tensor_core: bool
    collective: bool


class Kernels(Struct, kw_only=True):
    count: int
    count_per_step: float
    distinct: int
    time_us_per_step: float
    tensor_core_share: float | None
    short_kernel_share: float | None  # kernels under 10 µs
    short_kernel_threshold_us: float
    launch_delay_us: dict[str, float] | None  # mean, p50, p90, max
    top: list[KernelRow]


class SyncApi(Struct, kw_only=True):
    api: str
    count_per_step: float
    time_us_per_step: float


class SyncCause(Struct, kw_only=True):
    op: str
    inner_op: str
    api: str
    count: int
    total_us: float
    location: Location | None = None


class Syncs(Struct, kw_only=True):
    count_per_step: float
    time_us_per_step: float
    apis: list[SyncApi]
    causes: list[SyncCause]


class CopyRow(Struct, kw_only=True):
    direction: CopyDirection
    count: int
    bytes: int
    total_us: float
    bandwidth_gb_s: float | None
    pageable_count: int
    pageable_bytes: int
    pinned_count: int
    pinned_bytes: int


class Copies(Struct, kw_only=True):
    directions: list[CopyRow]
    htod_bytes_per_step: float
    pageable_htod_bytes_per_step: float
    count_per_step: float


class MemoryRow(Struct, kw_only=True):
    device: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None


class Pattern(Struct, kw_only=True):
    id: PatternId
    share: float
    evidence: dict[str, Any]
    title: str = ""


class Recommendation(Struct, kw_only=True):
    id: FixId
    title: str
    evidence: dict[str, Any]
    location: Location | None
    estimated_speedup: float | None
    estimate: str = ""  # the reasoning behind the estimate, in words
    after: FixId | None = None  # the fix this estimate builds on (measured against the step with it), else None


class Considered(Struct, kw_only=True):
    """A fix the advice weighed for this run and left out, and why (on a CPU run: its settings, its CPU, its
    compute share); none of them is in `recommendations`."""

    id: FixId
    reason: str
    estimated_speedup: float | None = None  # its estimate, when it was left out for gaining under MIN_GAIN


class RankDiagnosis(Struct, kw_only=True):
    """The full single-rank diagnosis of one chosen rank."""

    role: DiagnosisRole
    rank: int | None
    path: str
    step_time_us: float | None
    patterns: list[Pattern]
    recommendations: list[Recommendation]


class CrossRank(Struct, kw_only=True):
    ranks: int
    slowest_rank: int | None
    fastest_rank: int | None
    step_time_spread: float | None  # slowest / fastest - 1
    step_ids: list[str] = msgspec.field(default_factory=list)
    step_time_us: dict[str, float] | None = None  # min, median, max of the ranks' mean step times
    matched_by: MatchedBy = ""  # "": no collective on two ranks
    collectives: int = 0  # collectives matched on two ranks or more
    arrival_skew_us: dict[str, float] | None = None  # mean, p50, p90, max over collectives
    median_rank: int | None = None
    straggler: Straggler | None = None
    exposed_communication_us: float | None = None  # per step, mean over ranks
    overlap_ratio: float | None = None  # mean over ranks
    top_collectives: list[CollectiveRow] = msgspec.field(default_factory=list)  # largest skew first
    diagnoses: list[RankDiagnosis] = msgspec.field(default_factory=list)
    failures: list[RankFailure] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)
    duplicate_ranks: list[int] = msgspec.field(default_factory=list)  # rank numbers claimed by several files


class TimelineRow(Struct, kw_only=True):
    label: str
    kind: TimelineRowKind  # host: ops at one nesting level; gpu: one stream; idle: one device


class TimelineSpans(Struct, kw_only=True):
    """Columns, one entry per span: row index, start (µs from the step's start), duration, and
    category and name as indexes into Timeline.categories and Timeline.names."""

    row: list[int]
    start_us: list[float]
    dur_us: list[float]
    category: list[int]
    name: list[int]


class TimelineSync(Struct, kw_only=True):
    row: int
    start_us: float
    dur_us: float
    api: str
    op: str
    location: Location | None = None


class Timeline(Struct, kw_only=True):
    """One representative (median) step, compact: the longest spans of host threads and GPU streams,
    the GPU's idle gaps by cause (categories idle_*), and the sync calls."""

    step_id: str
    start_us: float  # the step's start, µs from the trace's start
    duration_us: float
    rows: list[TimelineRow]
    categories: list[str]
    names: list[str]
    spans: TimelineSpans
    syncs: list[TimelineSync]
    left_out: int = 0  # the shortest spans, left out to stay compact


class Report(Struct, kw_only=True):
    schema: str = SCHEMA
    generator: str = ""
    source: Source
    device: Device | None
    devices: list[Device] = msgspec.field(default_factory=list)
    accelerator: Accelerator = "none"
    rank: int | None = None
    world_size: int | None = None
    steps: list[StepRow]
    summary: Summary
    gpu: Gpu | None = None
    kernels: Kernels | None = None
    syncs: Syncs | None = None
    copies: Copies | None = None
    memory: list[MemoryRow] = msgspec.field(default_factory=list)
    patterns: list[Pattern] = msgspec.field(default_factory=list)
    recommendations: list[Recommendation] = msgspec.field(default_factory=list)
    ranks: list[RankRow] = msgspec.field(default_factory=list)
    cross_rank: CrossRank | None = None
    notes: list[str] = msgspec.field(default_factory=list)
    timeline: Timeline | None = None
    run: Run | None = None  # live captures only (defined below)
    lines: Lines | None = None  # time by user source line, when the trace carries source information
    modules: Modules | None = None  # time by module path, when the trace carries module ranges
    prediction: Prediction | None = None  # this job on other GPUs (`--predict GPUS`, `stepscope predict`)
    utilization: Utilization | None = None  # FLOPs, MFU, roofline (model/usage.py)
    memory_usage: MemoryUsage | None = None  # the peak by category, memory over time, batch headroom
    replay: Replay | None = None  # live captures: how the timeline was made and how far it is from the job
    meter: Meter | None = None  # live captures: every step measured unprofiled; the headline and its phases
    considered: list[Considered] = msgspec.field(default_factory=list)  # fixes weighed and left out, with why
    batch_sizes: BatchSizes | None = None  # the step, samples/s and peak memory at other batch sizes (model/batches)


class LineCost(Struct, kw_only=True):
    """Per-step time of one user line (or, with file None, of a group no line can take)."""

    file: str | None
    line: int | None
    function: str = ""
    code: str = ""
    label: str  # "train.py:57", or why the time has no line: "backward: forward op not found: AccumulateGrad"
    cpu_fwd_us: float  # host time of the ops the line ran (a DataLoader, optimizer step, zero_grad whole)
    cpu_bwd_us: float  # host time of the autograd nodes of the ops it created
    gpu_fwd_us: float  # kernel time launched from them
    gpu_bwd_us: float
    kernels: float  # kernels per step, forward and backward
    share: float  # the larger of CPU and GPU time, as a share of the step


class LineSync(Struct, kw_only=True):
    """Host-device syncs per step made from one line (on a CPU-only trace: scalar reads that would sync)."""

    file: str | None
    line: int | None
    code: str = ""
    op: str  # what the line called, e.g. aten::item
    via: str  # the sync call, e.g. cudaStreamSynchronize (aten::_local_scalar_dense on a CPU-only trace)
    count_per_step: float
    time_us_per_step: float


class Lines(Struct, kw_only=True):
    source: SourceKind
    granularity: Granularity
    attributed_share: float  # of the host time of ops, units and autograd nodes, the part that found a line
    rows: list[LineCost]  # most expensive first
    unattributed: list[LineCost] = msgspec.field(default_factory=list)
    syncs: list[LineSync] = msgspec.field(default_factory=list)
    fitted: Fitted = ""  # "step meter": host times fitted inside the meter's phases (pipeline/fit_lines.py)


class ModuleCost(Struct, kw_only=True):
    """Per-step time of one module, with its children (the plain fields) and alone (`own_*`)."""

    path: str  # model.layer1.0.conv1
    calls: float  # forward calls per step
    cpu_fwd_us: float
    cpu_bwd_us: float
    gpu_fwd_us: float
    gpu_bwd_us: float
    kernels: float
    own_cpu_us: float
    own_gpu_us: float
    share: float  # the larger of CPU and GPU time (with children), as a share of the step


class Modules(Struct, kw_only=True):
    source: SourceKind
    rows: list[ModuleCost]  # in path order, parents before children
    fitted: Fitted = ""  # as Lines.fitted


def to_json(report: Report, indent: int = 2) -> bytes:
    return msgspec.json.format(msgspec.json.encode(report, order="deterministic"), indent=indent)


def from_json(data: bytes | str) -> Report:
    """Decode a stepscope.report/1 document; raises msgspec errors on anything else."""
    report = msgspec.json.decode(data, type=Report)
    if report.schema != SCHEMA:
        raise ValueError(f"unsupported schema {report.schema!r} (expected {SCHEMA})")
    return report
