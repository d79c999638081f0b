"""One attempt at a window, for one leading step source: unprofiled steps, the profiled window, more
unprofiled steps, each phase timed. The session runs a new cycle when a stronger source takes the lead."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from stepscope.capture.options import CaptureOptions
from stepscope.capture.overhead import StepTimes
from stepscope.capture.window import ProfilerWindow

SKIP, WINDOW, REFERENCE, DONE = "skip", "window", "reference", "done"
INFERENCE = "inference or evaluation only"


@dataclass
class Cycle:
    spec: CaptureOptions
    leader: str | None
    trace_path: Path
    timing_path: Path | None = None  # where the timing pass's trace goes, when there is one
    times: StepTimes = field(default_factory=StepTimes)
    phase: str = SKIP
    window: ProfilerWindow | None = None
    skip_target: int = 0
    window_end: int | None = None  # the leader's step count when the window ended
    failure: str | None = None  # why the profiler recorded nothing, when it failed
    calibration: dict | None = None  # the profiler's cost per event for the timing trace's settings
    notes: list[str] = field(default_factory=list)
    backward_runs: list[int] = field(default_factory=list)  # backward passes per optimizer step, while recording
    training_seen: bool = False  # a backward pass or optimizer step ran in the recorded steps
    _backward_run: int = 0

    def __post_init__(self) -> None:
        self.skip_target = self.spec.skip

    @property
    def step_phase(self) -> str:
        """How the step that is now running is timed."""
        w = self.window
        if self.phase == WINDOW and w is not None and w.waiting:
            return "between passes"  # unprofiled, but just after a profiler ran: no reference step
        if self.phase != WINDOW or w is None or not w.running:
            return "unprofiled"
        if not w.recording and w.recorded == 0 and w.timing is not None and w.timing.recording:
            return "timing"
        return "recorded" if w.recording else "warmup"

    @property
    def recorded(self) -> int:
        return self.window.recorded if self.window is not None else 0

    @property
    def exported(self) -> Path | None:
        w = self.window
        return w.exported.path if w is not None and w.exported is not None else None

    @property
    def timing_exported(self) -> Path | None:
        w = self.window
        exported = w.timing_exported if w is not None else None
        return exported.path if exported is not None else None

    def observe(self, source: str, recording: bool) -> None:
        """Count backward passes per optimizer step (gradient accumulation) while the steps are recorded."""
        if not recording:
            self._backward_run = 0
            return
        if source == "backward":
            self._backward_run += 1
            self.training_seen = True
        elif source == "optimizer":
            if self._backward_run:
                self.backward_runs.append(self._backward_run)
            self._backward_run = 0
            self.training_seen = True

    @property
    def accumulation(self) -> int | None:
        """Backward passes per step when the step holds several (gradient accumulation), else None."""
        if not self.backward_runs:
            return None
        k = int(statistics.median(self.backward_runs))
        return k if k >= 2 else None

    def phase_seen(self, sees_backward: bool) -> str | None:
        """Training, when a backward pass or optimizer step ran in the recorded steps; else, if backward passes
        are observed at all, inference or evaluation only."""
        if self.training_seen or self.leader in ("optimizer", "backward"):
            return "training"
        return INFERENCE if sees_backward and self.recorded else None


def replaced_notes(cycles: list[Cycle], c: Cycle) -> list[str]:
    """What the reported cycle's window replaced: earlier windows of a weaker source that recorded steps."""
    earlier = [x for x in cycles if x is not c and x.recorded and x.exported]
    return [f"an earlier window recorded {x.recorded} {x.leader} steps with no "
            f"{'optimizer step' if x.leader == 'backward' else 'backward pass'} (evaluation or a warm-up before "
            f"training?); the window of {c.leader} steps replaces it" for x in earlier if c.recorded]
