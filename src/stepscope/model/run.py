"""The report's `run` section (stepscope.report/1): how a live capture went, the unprofiled reference the
profiler's overhead is corrected against, and the settings the program had. Fields are added, never renamed or
removed, within the schema version."""

from __future__ import annotations

import msgspec

from stepscope.model.kinds import (
    CostSource,
    EnergyBasis,
    FrameworkName,
    Location,
    ProfiledDevice,
    ReferenceMethod,
    RunPhase,
    RunStatus,
)
from stepscope.model.runfile import negative
from stepscope.model.telemetry import WindowSummary


class Struct(msgspec.Struct, kw_only=True, omit_defaults=False, frozen=True):
    pass


class Run(Struct, kw_only=True):
    """How a live capture went (`stepscope run`, the Python API, a trainer callback); absent for files."""

    command: list[str]  # the program and its arguments, as run
    status: RunStatus
    exit_code: int | None  # the program's own (None for the API and callbacks)
    step_source: str | None  # optimizer | dataloader | forward | manual | lightning | huggingface
    skip: int
    warmup: int
    steps_requested: int
    steps_recorded: int
    first_recorded_step: int | None  # the program's step number (from 0) of the first recorded step
    batch_size: int | None
    batch_size_source: str | None  # user | trainer | dataloader | model input
    profiled_device: ProfiledDevice
    profiler_overhead: float | None  # recorded step / unprofiled step - 1 (overhead_correction.overhead's figure)
    unprofiled_step_us: float | None
    recorded_step_us: float | None
    telemetry: WindowSummary | None = None  # the window summary of telemetry.json
    folder: str | None = None
    files: list[str] = msgspec.field(default_factory=list)
    step_on: str | None = None  # the step source the user chose (--step-on), None: the strongest one seen
    phase: RunPhase | None = None  # inference or evaluation only: no backward pass recorded
    grad_accumulation: int | None = None  # backward passes per optimizer step, when more than one
    samples_per_step: int | None = None  # batch_size x grad_accumulation when the batch is one micro-batch
    reference: Reference | None = None  # how the unprofiled steps were timed
    overhead_correction: OverheadCorrection | None = None  # the overhead measured, and what the replay took out
    settings: Settings | None = None  # what the program had set (every fix is conditional on it)
    energy_per_step: list[StepEnergy] = msgspec.field(default_factory=list)  # per GPU with NVML power


class StepEnergy(Struct, kw_only=True):
    """One GPU's energy per training step: the window's mean NVML power x the step time. The window is marked on
    the host clock and is often shorter than NVML's energy counter updates, so its counter difference is not used."""

    gpu: int  # NVML index
    joules: float
    basis: EnergyBasis  # unprofiled step time: the reference steps; step time: the recorded ones, profiler included


class Reference(Struct, kw_only=True):
    """The unprofiled step time the profiler's overhead is measured against."""

    method: ReferenceMethod  # synchronized slices: GPU, torch.cuda.synchronize() at each end
    step_us: float  # the mean over the slices, or the median unprofiled step
    values_us: list[float]  # per slice (its mean step), or per step
    steps: int
    noise: float  # stats.step_noise of the values (the spread of one step): overheads inside it are noise


class OverheadCorrection(Struct, kw_only=True):
    """The profiler's overhead, measured like with like, and what the one correction (the replay, `Replay`) took out:
    the same figures as the replay section's, from the same decision (stepscope.replay.deperturb)."""

    profiled_step_us: float  # the median recorded step as the trace has it (GPU time included)
    unprofiled_step_us: float
    overhead: float | None  # profiled / unprofiled - 1; None when they are not comparable
    noise: float
    within_noise: bool
    applied: bool  # the timeline is the replay with the profiler's cost taken out (Replay.replayed)
    host_work_us_per_step: float  # host time the profiler's per-op cost falls on (median recorded step)
    removed_us_per_step: float  # the profiler's cost the replay took out per step (Replay.removed_us_per_step)
    removed_share_of_host_work: float


class LoaderSettings(Struct, kw_only=True):
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None = None
    batch_size: int | None = None
    batches_per_epoch: int | None = None
    iterators_started: int = 0  # new iterators (epochs: workers started again) while the steps were recorded
    batch_bytes: int | None = None  # the first batch's tensors: what crosses from a worker to the main process
    location: Location | None = None  # the line that built the DataLoader


class OptimizerSettings(Struct, kw_only=True):
    name: str
    foreach: bool | None = None
    fused: bool | None = None
    location: Location | None = None  # the line that built the optimizer


class FrameworkSettings(Struct, kw_only=True):
    """The framework that runs the step: its fixes are its own settings, at the lines where the user sets them."""

    name: FrameworkName
    config_name: str | None = None  # the configuration call ("TrainingArguments", "Trainer", "Accelerator")
    config: Location | None = None  # the line of that call
    call: Location | None = None  # the user's line that runs the framework's loop (trainer.train())
    loader: Location | None = None  # accelerate: the user's DataLoader( line (the one stepped is its copy)


class Settings(Struct, kw_only=True):
    """What the program had set when the recorded steps began; None: not known."""

    dataloader: LoaderSettings | None = None
    optimizer: OptimizerSettings | None = None
    autocast: str | None = None  # the autocast dtype in the model's forward ("bfloat16") or "off"
    compiled: bool | None = None  # torch.compile in use
    channels_last: bool | None = None  # the convolutions' weights are channels_last
    conv_layers: int | None = None
    tf32_matmul: bool | None = None
    tf32_cudnn: bool | None = None
    float32_matmul_precision: str | None = None
    cpu_cores: int | None = None  # cores the process may run on
    intra_op_threads: int | None = None  # torch.get_num_threads()
    cpu_capability: str | None = None  # the CPU kernels torch uses: "AVX512", "AVX2", ...
    cpu_bf16: str | None = None  # the CPU flag for native bf16 ("amx_bf16", "avx512_bf16"), None without
    framework: FrameworkSettings | None = None  # the Hugging Face Trainer, Lightning or accelerate, when one runs


class Replay(Struct, kw_only=True):
    """How a live capture's timeline was made: its steps replayed without the profiler's cost per event (calibrated,
    else fitted to the unprofiled steps; stepscope.replay.deperturb), checked against the unprofiled steps; or why
    the recorded trace is used as it is."""

    replayed: bool
    why_not: str | None = None  # why the timeline is the recorded trace as it is
    timeline_trace: str | None = None  # the trace the steps' timeline comes from (the timing pass's)
    recorded_step_us: float | None = None  # median step of that trace, as recorded
    replayed_step_us: float | None = None  # median step of the replay
    unprofiled_step_us: float | None = None  # the run's reference (the report's headline step)
    error: float | None = None  # replayed / unprofiled - 1
    trusted: bool = False  # |error| within 5%: the replay stands for the job
    removed_us_per_step: float | None = None  # the profiler's cost taken out of the host's path, per step
    profiler_cost_ns: dict[str, float] = msgspec.field(default_factory=dict)  # per event: op, launch, alloc, range
    # The replay against the step meter phase by phase (per step, µs): {"data": {"replayed": .., "measured": ..,
    # "error": ..}, "optimizer": ..., "rest": ...}; error None where the measured phase is under 1% of the step.
    phases: dict[str, dict[str, float | None]] = msgspec.field(default_factory=dict)
    # How profiler_cost_ns was sized: "calibration" (measured on the capturing machine) | "fitted" (the default cost
    # per event scaled until the replayed step reaches the top of the unprofiled steps' spread); None: none taken out.
    cost_source: CostSource | None = None


MAX_SAMPLES = 10**7  # samples per step: beyond any batch that fits a machine (model/batches.MAX_BATCH, the same bound)


def run_problem(run: Run) -> str | None:
    """Why a run section read back cannot be what a capture wrote (the analysis of its folder takes its batch, its
    reference steps and its settings), None when it can be."""
    for name in ("batch_size", "samples_per_step", "grad_accumulation"):
        value = getattr(run, name)
        if value is not None and not 1 <= value <= MAX_SAMPLES:
            return f"run.{name} is {value}: 1 to {MAX_SAMPLES:,}"
    if min(run.skip, run.warmup, run.steps_requested, run.steps_recorded) < 0:
        return "run.skip, warmup and steps must be 0 or more"
    ref = run.reference
    if ref is not None and (ref.step_us <= 0 or ref.noise < 0 or ref.steps < 0 or any(v < 0 for v in ref.values_us)):
        return "run.reference: a step time must be above 0, its values and noise 0 or more"
    if run.settings is not None and (where := negative(run.settings, "run.settings")) is not None:
        return f"{where} is negative: a count, 0 or more"
    return None
