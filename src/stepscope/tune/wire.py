"""What the tune parent tells a trial's child process, and what the child writes back (JSON files)."""

from __future__ import annotations

from typing import Any

import msgspec


class Wire(msgspec.Struct, kw_only=True, omit_defaults=False):
    pass


class CallSite(Wire, kw_only=True):
    file: str | None
    line: int | None
    value: Any = None  # e.g. the set_to_none a zero_grad call used


class FrameworkSite(Wire, kw_only=True):
    """The training framework the program runs its steps under (stepscope.frameworks), and its lines."""

    name: str  # "huggingface" | "lightning" | "accelerate"
    package: str  # the package its frames came from ("lightning" or "pytorch_lightning")
    config_name: str | None = None  # the configuration call as the user wrote it ("TrainingArguments")
    config: CallSite | None = None  # that call, where the fixes the framework has a setting for go
    call: CallSite | None = None  # the user's line that runs the framework's loop
    loader: CallSite | None = None  # accelerate: the user's DataLoader( call (the loader stepped is its copy)


class TrialSpec(Wire, kw_only=True):
    target: str  # a script path, or a module name when `module`
    args: list[str]
    module: bool = False
    fixes: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)  # fix id -> its params
    seed: int = 0
    mode: str = "measure"  # "measure": time steps, no profiler; "profile": what `stepscope run` does
    warmup: int = 3  # steps run before the timed slice
    steps: int = 20  # at least this many timed steps ...
    min_seconds: float = 2.0  # ... and at least this long, over ...
    windows: int = 3  # ... this many windows, each synchronised with the device at its ends
    abort_step_ns: float | None = None  # steps this slow (median, after the first) end the trial: far slower
    batch_size: int | None = None  # the user's word on samples per step
    result: str = ""  # where the child writes its ChildResult
    profile_folder: str | None = None  # mode "profile": the run folder
    skip: int | None = None  # mode "profile": unprofiled steps before the window (past a compilation)
    ladder: list[LadderEntry] = msgspec.field(default_factory=list)  # mode "profile": what the ladder did
    reference: ReferenceWindows | None = None  # mode "profile": the tune's own measurement of this configuration
    framework: FrameworkSite | None = None  # the baseline ran under it: fixes it has a setting for go through it


class LadderEntry(Wire, kw_only=True):
    """What the ladder did with a fix, for the final diagnosis."""

    id: str
    kept: bool
    text: str  # "applied by stepscope tune (1.72x ...)" | "measured: 1.03x (...), not kept"


class ReferenceWindows(Wire, kw_only=True):
    """The tuned configuration as the tune measured it unprofiled: the final diagnosis' unprofiled reference."""

    steps: list[int]
    seconds: list[float]
    batch_size: int | None = None
    samples_per_s: float | None = None


class LoaderSite(Wire, kw_only=True):
    file: str | None
    line: int | None
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    batch_size: int | None
    batches: int | None  # len(loader), when it has one
    prefetch_factor: int | None = None


class OptimizerSite(Wire, kw_only=True):
    file: str | None
    line: int | None
    cls: str
    foreach: bool | None
    fused: bool | None
    supports_fused: bool = False


class ModelInfo(Wire, kw_only=True):
    cls: str
    module: str  # the class's module ("__main__" for the script's own)
    parameters: int
    dtype: str  # of the first floating parameter
    device: str
    conv: bool  # has a 2-d convolution (channels_last applies)
    linear: bool
    compiled: bool
    autocast: bool  # the first forward ran under autocast already
    channels_last: bool


class DeviceInfo(Wire, kw_only=True):
    kind: str  # "cuda" | "cpu"
    name: str
    count: int = 1
    compute_capability: str | None = None
    total_memory_bytes: int | None = None
    bf16: bool = False  # bfloat16 autocast is supported
    bf16_native: bool = False  # ... in hardware (CUDA: compute capability 8+; CPU: AVX512-BF16 or AMX)
    cpu_cores: int = 1
    torch: str = ""


class TransformSite(Wire, kw_only=True):
    """A loader's dataset transform, as uint8_transfer sees it."""

    file: str | None  # the source file of the class holding it, when it is the user's
    chain: list[str]  # its transforms' class names
    ending: str = ""  # the float conversion (+ normalisation) uint8_transfer moves to the device; '' if none
    mean: list[float] | None = None
    std: list[float] | None = None


class Settings(Wire, kw_only=True):
    """What the program used, seen from the patched constructors and calls."""

    loaders: list[LoaderSite] = msgspec.field(default_factory=list)
    optimizers: list[OptimizerSite] = msgspec.field(default_factory=list)
    zero_grad: list[CallSite] = msgspec.field(default_factory=list)
    copies: list[CallSite] = msgspec.field(default_factory=list)  # .to()/.cuda() of a batch to the device
    model: ModelInfo | None = None
    model_site: CallSite | None = None  # where the model's first forward was called
    peak_memory_bytes: int | None = None
    transforms: list[TransformSite] = msgspec.field(default_factory=list)  # each loader's dataset transform
    batch_copies: list[CallSite] = msgspec.field(default_factory=list)  # where a uint8 image batch was copied
    calls: dict[str, list[CallSite]] = msgspec.field(default_factory=dict)  # fix id -> call sites its patch saw
    framework: FrameworkSite | None = None  # the Hugging Face Trainer, Lightning or accelerate, when one runs


class WindowResult(Wire, kw_only=True):
    steps: int
    samples: float  # or steps, when the unit is steps
    seconds: float
    start_s: float  # from the run's first step boundary
    kind: str = "timed"  # "timed" | "warm-up" | "compiled" (set aside)
    timer: str = "host clock"  # "step meter" (its steps summed) | "synchronised windows" | "host clock" (the clock's)
    phases_s: dict[str, float] = msgspec.field(default_factory=dict)  # the meter's phases over the window


class ChildResult(Wire, kw_only=True):
    status: str  # measured | slower | too few steps | no steps | failed | profiled | patch failed (stepscope's)
    exit_code: int
    program_status: str  # capture.program.Outcome.status
    detail: str = ""
    step_source: str | None = None
    batch_size: int | None = None
    steps_completed: int = 0
    warmup_ns: list[float] = msgspec.field(default_factory=list)  # host clock
    step_ns: list[float] = msgspec.field(default_factory=list)  # the timed slice, per step
    slice_ns: float | None = None  # the timed slice end to end (synchronised at both ends on CUDA)
    timing: str = "host clock"
    losses: list[float | None] = msgspec.field(default_factory=list)  # per step from the first
    settings: Settings = msgspec.field(default_factory=Settings)
    applied: dict[str, int] = msgspec.field(default_factory=dict)  # fix id -> things it changed
    device: DeviceInfo | None = None
    notes: list[str] = msgspec.field(default_factory=list)
    report: str | None = None  # mode "profile": the report.json written
    windows: list[WindowResult] = msgspec.field(default_factory=list)  # every window, set aside ones included
    unit: str = "steps"  # what the windows count: "samples" | "steps"
    warmup_s: float | None = None  # from the first step boundary to the first timed window
    compile_s: float | None = None  # in torch's compile callbacks (tracing, backward compile, CUDA graph recording)
    compiles: int = 0
    failed_fix: str = ""  # status "patch failed": the fix whose patch failed ('' when stepscope failed elsewhere)


def encode(obj: Wire) -> bytes:
    return msgspec.json.encode(obj)


def decode_spec(data: bytes) -> TrialSpec:
    return msgspec.json.decode(data, type=TrialSpec)


def decode_result(data: bytes) -> ChildResult:
    return msgspec.json.decode(data, type=ChildResult)
