"""Capture options: the one place their defaults live, for `stepscope run`, the Python API and the callbacks.

`stepscope run`'s flags, `stepscope.profile(...)`'s keyword arguments and the trainer callbacks' options
all take their defaults from `CaptureOptions` (a test checks that they agree).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from stepscope.capture.launcher import launched

# What can mark a step, strongest first; `--step-on` takes one of these ("marker": stepscope.step() only).
STEP_SOURCES = ("optimizer", "backward", "dataloader", "forward", "marker")


@dataclass(frozen=True)
class CaptureOptions:
    """Which steps to profile and how. Every field's default here is the default everywhere."""

    # Steps of the step source run unprofiled first: start-up, compilation, allocator warm-up, and the step meter's
    # headline (pipeline/meter.py: the steps before the profiler, less the first fifth).
    skip: int = 10
    # Past `skip`, wait (up to 2x) while the step meter sees the steps still getting faster or they have run under
    # 0.1 s (capture/waiting.py); off where a skip was given, and under a launcher (`skipping`).
    settle: bool = True
    warmup: int = 2  # profiled but discarded: the profiler's own start-up cost
    steps: int = 5  # recorded
    step_on: str | None = None  # one of STEP_SOURCES; None: the strongest source the program shows
    batch_size: int | None = None  # samples per step; None: from the data
    record_shapes: bool = True  # operator input shapes: the FLOP count (MFU, roofline) needs them
    profile_memory: bool | None = None  # None: on when a GPU is profiled (allocator peaks), off on a CPU
    with_stack: bool = False  # off by default: costly, and the source of a known export crash
    attribution: bool = True  # source-line and module ranges in the recorded steps
    telemetry: bool = True  # CPU (and GPU) readings on a background thread (~0.1% of one core)
    telemetry_interval: float = 0.2  # seconds between readings
    reference_steps: int = 5  # unprofiled steps timed after the window, besides those before it
    # A timing pass with minimal settings before the recorded pass, when that one records shapes, memory, stacks
    # or line ranges: the replay's timeline comes from it (capture/window.py says why).
    timing_pass: bool = True
    calibrate: bool = True  # measure the profiler's cost per event after the window (capture/calibrate.py)
    # The step meter's hooks on the calls that block on a device (item(), tolist(), cpu(), synchronize()); None: on
    # when CUDA is available (on a CPU they block on nothing).
    meter_syncs: bool | None = None

    def __post_init__(self) -> None:
        if self.skip < 0 or self.warmup < 0 or self.steps < 1 or self.reference_steps < 0:
            raise ValueError("skip, warmup and reference_steps must be >= 0 and steps >= 1")
        if self.step_on is not None and self.step_on not in STEP_SOURCES:
            raise ValueError(f"step_on must be one of {', '.join(STEP_SOURCES)}, not {self.step_on!r}")
        if self.telemetry_interval <= 0:
            raise ValueError("telemetry_interval must be > 0 (telemetry=False turns telemetry off)")

    def replace(self, **changes: object) -> CaptureOptions:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


DEFAULTS = CaptureOptions()


def skipping(skip: int | None) -> dict[str, int | bool]:
    """`skip` and `settle` for the steps to skip as the user gave them: a number is exact; None is the default,
    then more while the steps settle, except under a launcher (torchrun: several ranks), where the default is exact
    too: each rank settles on its own steps' times, so they would record different steps, and the window is agreed
    across ranks by the step count alone (no collective on the job's own process groups, which could reorder or
    deadlock its work). One rule for `stepscope run --skip`, `stepscope.profile(skip=)` and the callbacks' `skip=`."""
    if skip is None:
        return {"skip": DEFAULTS.skip, "settle": launched() is None}
    return {"skip": skip, "settle": False}
