"""Unprofiled step times: the reference the profiler's overhead is measured and corrected against.

Every step is timed with the host clock whether profiled or not. On a GPU the host runs ahead of the
device, so a host-clock step measures how fast work is enqueued, not the step: there the reference is
timed over slices of unprofiled steps bracketed by `torch.cuda.synchronize()` (one sync at each end of a
slice, never per step), one slice before the window and one after it. On a CPU the host clock is the
step, and the reference is the median unprofiled step (the first timed step, which still pays for
start-up, left out).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from stepscope.stats import step_noise

MIN_REFERENCE_STEPS = 2


def device_clock_ns() -> tuple[int, bool]:
    """The host clock once the GPU's queue has drained (CUDA in use), and whether it was synchronised.

    CUDA is left alone when the program has not initialised it (a CPU job, or before DataLoader workers fork)."""
    import sys

    torch = sys.modules.get("torch")
    synced = False
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        synced = True
    return time.perf_counter_ns(), synced


@dataclass(frozen=True)
class Reference:
    """The unprofiled step time and how it was taken."""

    method: str  # "synchronized slices" | "host clock"
    step_ns: float  # mean over the slices, or the median unprofiled step
    values_ns: tuple[float, ...]  # per slice (its mean step), or per step
    steps: int
    noise: float  # stats.step_noise of the values


@dataclass
class Slice:
    steps: int
    ns: int
    synced: bool


@dataclass
class StepTimes:
    durations: dict[str, list[int]] = field(default_factory=dict)  # phase -> step durations in ns (host clock)
    slices: list[Slice] = field(default_factory=list)
    _start: int | None = None
    _first_unprofiled_seen: bool = False
    _slice: tuple[int, int, bool] | None = None  # (start ns, steps at start, synced)

    def begin_step(self, t_ns: int) -> None:
        self._start = t_ns

    def end_step(self, t_ns: int, phase: str) -> None:
        if self._start is None:
            return  # the step began before the leading source was known
        duration = t_ns - self._start
        self._start = None
        if phase == "unprofiled" and not self._first_unprofiled_seen:
            self._first_unprofiled_seen = True  # the first timed step still pays for start-up
            return
        self.durations.setdefault(phase, []).append(duration)

    def begin_slice(self, completed: int) -> int:
        """Start a slice of unprofiled steps at this boundary; returns the time the next step begins."""
        t, synced = device_clock_ns()
        self._slice = (t, completed, synced)
        return t

    def end_slice(self, completed: int) -> int:
        """End the open slice at this boundary (nothing open: nothing done); returns the time now."""
        t, synced = device_clock_ns()
        if self._slice is not None:
            start, first, began_synced = self._slice
            if completed > first:
                self.slices.append(Slice(completed - first, t - start, synced and began_synced))
            self._slice = None
        return t

    def drop_slice(self) -> None:
        self._slice = None

    def reference(self) -> Reference | None:
        synced = [s for s in self.slices if s.synced]
        if synced:
            steps = sum(s.steps for s in synced)
            values = tuple(s.ns / s.steps for s in synced)
            return Reference("synchronized slices", sum(s.ns for s in synced) / steps, values, steps,
                             step_noise(values))
        per_step = self.durations.get("unprofiled", [])
        if len(per_step) < MIN_REFERENCE_STEPS:
            return None
        median = float(statistics.median(per_step))
        return Reference("host clock", median, tuple(float(d) for d in per_step), len(per_step),
                         step_noise(per_step))

    def recorded_ns(self) -> float | None:
        """Median recorded step on the host clock (on a GPU this is enqueue time: use the trace instead)."""
        recorded = self.durations.get("recorded", [])
        return float(statistics.median(recorded)) if recorded else None


