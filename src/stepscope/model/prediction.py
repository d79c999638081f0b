"""The report's `prediction` section (stepscope.report/1): this job on other GPUs (`--predict GPUS`, `stepscope
predict`), from the origin's trace. Fields are added, never renamed or removed, within the schema version."""

from __future__ import annotations

import msgspec

from stepscope.model.kinds import PatternId


class Struct(msgspec.Struct, kw_only=True, omit_defaults=False, frozen=True):
    pass


class PredictionOrigin(Struct, kw_only=True):
    """The GPU the trace was recorded on, as measured."""

    gpu: str  # the hardware table's id ("h100-sxm"), or the device name when the table has no row
    step_time_us: float | None
    energy_j_per_step: float | None  # mean NVML power over the telemetry window x step time
    name: str = ""  # the device name the trace reports
    samples_per_s: float | None = None
    bottleneck: PatternId | None = None  # the primary pattern
    gpu_utilization: float | None = None
    power_w: float | None = None  # the mean NVML power the energy comes from


class PredictionTarget(Struct, kw_only=True):
    """The job on another GPU, predicted from the origin's trace."""

    gpu: str  # the hardware table's id
    step_time_us: float
    low_us: float  # the interval, from the model's measured error on GPU time (docs/predict.md)
    high_us: float
    samples_per_s: float | None
    bottleneck: PatternId | None  # the primary pattern of the replayed steps
    price_per_gpu_hour: float | None  # USD
    cost_per_million_samples: float | None  # USD
    energy_j_per_step: float | None  # an estimate: predicted time x the target's power at the predicted utilisation
    assumptions: list[str]
    name: str = ""  # the table's name for the GPU
    gpu_utilization: float | None = None  # of the replayed steps
    gpu_time_us: float | None = None  # GPU busy time per step (kernels, copies), replayed
    cost_per_epoch: float | None = None  # USD, with --samples-per-epoch or --steps-per-epoch
    fastest: bool = False  # the shortest step of the targets
    cheapest: bool = False  # the lowest cost per sample (per step when the batch size is unknown) of the targets


class Prediction(Struct, kw_only=True):
    origin: PredictionOrigin
    targets: list[PredictionTarget]
    model: str  # the method and its version, in words
    sources: list[str]  # where the figures come from: the hardware table's documents and the prices' pages
    warnings: list[str] = msgspec.field(default_factory=list)  # stale prices, unvalidated targets
