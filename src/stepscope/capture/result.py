"""What a capture session hands back once the program has ended: how the capture went, the reference, the files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscope.capture.overhead import Reference


@dataclass
class CaptureResult:
    trace_path: Path | None
    step_source: str | None
    steps_completed: int  # by the leading source
    first_recorded_step: int | None
    steps_recorded: int
    window_complete: bool
    batch_size: int | None
    batch_size_source: str | None
    gpu: bool | None  # None: the profiler never started
    reference: Reference | None  # the unprofiled step time
    recorded_step_ns: float | None = None  # median recorded step, host clock
    accumulation: int | None = None  # backward passes per optimizer step, when several
    phase: str | None = None  # "training" | INFERENCE | None (not observable)
    step_on: str | None = None  # the source the user chose
    settings: Any = None  # capture.settings.Settings, when read
    failure: str | None = None  # why the profiler recorded nothing, when it failed (also among the notes)
    notes: list[str] = field(default_factory=list)
    timing_path: Path | None = None  # the timing pass's trace, when there was one
    calibration: dict[str, Any] | None = None  # capture.calibrate.ProfilerCost of the timing trace's settings

    @property
    def samples_per_step(self) -> int | None:
        """The batch size times the backward passes per step when a loader's batch is one micro-batch."""
        if self.batch_size and self.accumulation and self.batch_size_source in ("dataloader", "model input"):
            return self.batch_size * self.accumulation
        return self.batch_size
