"""The run's telemetry (`stepscope.telemetry/1`, the run folder's telemetry.json): CPU per core and NVML
readings over the run, and their summary over the profiled window, which the report's run section carries.
Capture fills these in (capture/telemetry.py, capture/nvml.py); the pipeline, predict and the renderers read
them. Imports nothing of ours but the leaf `runfile` (capture loads it inside the user's program). Fields are
added, never renamed or removed, within the schema version."""

from __future__ import annotations

import msgspec

from stepscope.model.runfile import negative

SCHEMA = "stepscope.telemetry/1"


class Struct(msgspec.Struct, kw_only=True, omit_defaults=False, frozen=True):
    pass


class GpuReading(Struct, kw_only=True):
    util: float | None = None  # % of time a kernel ran, over NVML's last sample period
    mem_util: float | None = None  # % of time memory was read or written
    mem_used_bytes: int | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None


class Sample(Struct, kw_only=True):
    t: float  # seconds since telemetry started
    cpu: list[float] | None  # busy % per core
    gpu: list[GpuReading] = msgspec.field(default_factory=list)


class GpuWindow(Struct, kw_only=True):
    index: int
    name: str
    util_mean: float | None
    mem_util_mean: float | None
    mem_used_max_bytes: int | None
    power_mean_w: float | None
    sm_clock_mean_mhz: float | None
    energy_j: float | None  # from the energy counter, read at the window's start and end


class WindowSummary(Struct, kw_only=True):
    """The readings over the profiled window (the report's `run.telemetry`)."""

    start_s: float
    end_s: float
    samples: int
    cpu_util_mean: float | None  # % over all cores
    cpu_util_per_core: list[float] | None
    gpu: list[GpuWindow] = msgspec.field(default_factory=list)


class TelemetryReport(Struct, kw_only=True):
    schema: str = SCHEMA
    generator: str = ""
    interval_s: float
    cpu_source: str | None
    cpu_cores: int | None
    gpus: list[str]
    notes: list[str]
    window: WindowSummary | None
    samples: list[Sample]


def telemetry_to_json(report: TelemetryReport) -> bytes:
    return msgspec.json.format(msgspec.json.encode(report), indent=1)


def telemetry_from_json(data: bytes) -> TelemetryReport:
    """Decode a stepscope.telemetry/1 document; raises msgspec errors or ValueError on anything else."""
    report = msgspec.json.decode(data, type=TelemetryReport)
    if problem := telemetry_problem(report):
        raise ValueError(problem)
    return report


def telemetry_problem(report: TelemetryReport) -> str | None:
    """Why the document cannot be readings (every number is a time, a share, a size, a clock or a count), None
    when it can be."""
    if not report.schema.startswith("stepscope.telemetry/"):
        return f"unsupported schema {report.schema!r} (expected {SCHEMA})"
    if (where := negative(report)) is not None:
        return f"a negative number at {where}"
    return None
