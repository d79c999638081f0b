"""The report's `utilization` and `memory_usage` sections (stepscope.report/1): how much of the machine the
steps use. Fields are added, never renamed or removed, within the schema version."""

from __future__ import annotations

import msgspec


class Struct(msgspec.Struct, kw_only=True, omit_defaults=False, frozen=True):
    pass


class PeakRow(Struct, kw_only=True):
    """A dense peak the MFU divides by, with the document it comes from."""

    dtype: str  # fp32 | tf32 | bf16 | fp16 | fp8 | int8
    tflops: float  # dense, per device
    source: str  # the source's id in the hardware table (docs/hardware.md)
    document: str
    url: str | None = None
    achievable_tflops: float | None = None  # measured on this device (python -m stepscope.hardware.measure)
    achievable_origin: str | None = None


class UncoveredOp(Struct, kw_only=True):
    op: str  # the op around the launch (GPU) or the outermost op (CPU) that no formula prices
    us_per_step: float


class RoofPoint(Struct, kw_only=True):
    """One kernel name launched by one op, over the steps."""

    kernel: str
    op: str
    kind: str  # matmul | conv | attention | elementwise | reduction | norm | copy
    dtype: str
    count_per_step: float
    time_us_per_step: float
    share: float  # of all kernel time
    tflops: float  # achieved
    gb_s: float  # achieved
    intensity: float | None  # FLOPs per byte
    roof: str  # compute | memory | latency | unknown
    roof_share: float | None  # achieved / the roof it sits under


class RoofClass(Struct, kw_only=True):
    roof: str
    share: float  # of the covered kernel time
    roof_share: float | None  # time-weighted achieved / roof
    kind: str  # the op kind with most time in the class


class Roofline(Struct, kw_only=True):
    peak_tflops: dict[str, float]  # datasheet, dense, per device, by dtype
    bandwidth_gb_s: float | None
    achievable_tflops: dict[str, float] = msgspec.field(default_factory=dict)
    achievable_gb_s: float | None = None
    kernel_us_per_step: float
    covered_share: float | None
    classes: list[RoofClass]
    points: list[RoofPoint]  # most time first
    left_out: int = 0  # points left out to keep the report small (the shortest)


class Utilization(Struct, kw_only=True):
    device: str
    hardware_row: str | None  # the hardware table's row id, None when the device is not in it
    hardware_name: str | None = None
    match_note: str | None = None
    devices: int = 1
    model_flops_per_step: float  # matrix products, convolutions and attention, forward + backward
    forward_flops_per_step: float
    backward_flops_per_step: float
    recompute_flops_per_step: float = 0.0  # forward work run again in the backward (activation recomputation)
    flops_by_dtype: dict[str, float] = msgspec.field(default_factory=dict)
    achieved_tflops: float  # model FLOPs per second, per device
    mfu: float | None
    hfu: float | None = None
    mfu_of_achievable: float | None = None
    why_no_mfu: str | None = None
    peaks: list[PeakRow] = msgspec.field(default_factory=list)
    cpu_peak_gflops: float | None = None  # an estimate, see cpu_peak_how
    cpu_peak_how: str | None = None
    shapes_recorded: bool = True
    covered_share: float | None = None  # of kernel time (GPU) or top-level op time (CPU)
    uncovered: list[UncoveredOp] = msgspec.field(default_factory=list)
    roofline: Roofline | None = None


class MemoryCategory(Struct, kw_only=True):
    name: str  # parameters | gradients | optimizer state | activations | temporaries | persistent | unexplained
    bytes: int
    note: str = ""


class ActivationLine(Struct, kw_only=True):
    file: str | None
    line: int | None
    label: str
    code: str = ""
    op: str = ""
    bytes: int


class BatchHeadroom(Struct, kw_only=True):
    """The largest batch that fits: an estimate from peak = fixed + per-sample x batch, 5% margin."""

    batch_size: int
    max_batch: int | None
    fixed_bytes: int
    per_sample_bytes: float
    capacity_bytes: int
    fragmentation: float
    non_pytorch_bytes: int | None = None
    margin: float = 0.05
    why_none: str | None = None


class DeviceMemoryUsage(Struct, kw_only=True):
    device: int  # -1: host memory (CPU-only runs)
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None
    reserved_gap_bytes: int | None  # peak reserved - peak allocated: the caching allocator's slack
    phase: str  # where the peak is: forward | backward | optimizer | before the step | outside the steps
    peak_step: str | None
    categories: list[MemoryCategory]  # add up to peak_allocated_bytes
    outside_count: list[MemoryCategory] = msgspec.field(default_factory=list)
    counts_from_profiler_start: bool = False
    nvml_used_max_bytes: int | None = None
    non_pytorch_bytes: int | None = None
    activation_lines: list[ActivationLine] = msgspec.field(default_factory=list)
    headroom: BatchHeadroom | None = None
    timeline_ms: list[float] = msgspec.field(default_factory=list)
    timeline_allocated: list[int] = msgspec.field(default_factory=list)
    timeline_reserved: list[int] = msgspec.field(default_factory=list)


class MemoryUsage(Struct, kw_only=True):
    devices: list[DeviceMemoryUsage]
    census: str | None = None  # the run's census file that split persistent memory, when there was one
    census_taken: str | None = None
