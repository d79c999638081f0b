"""Step times by phase, and the profiler's overhead read from them.

Every step is timed with the host clock whether profiled or not. The overhead is the median recorded
step over the median unprofiled step, minus one: the profiler's own cost as the program felt it.
Medians, because the first steps (allocator, caches, worker start-up) and the odd slow step would
otherwise decide the answer.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

MIN_REFERENCE_STEPS = 2


@dataclass(frozen=True)
class Overhead:
    unprofiled_step_ns: float
    recorded_step_ns: float
    reference_steps: int
    recorded_steps: int

    @property
    def ratio(self) -> float:
        """Recorded step time over unprofiled step time, minus one (0.05 = the profiler added 5%)."""
        return self.recorded_step_ns / self.unprofiled_step_ns - 1.0


@dataclass
class StepTimes:
    durations: dict[str, list[int]] = field(default_factory=dict)  # phase -> step durations in ns
    _start: int | None = None
    _first_unprofiled_seen: bool = False

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

    def restart(self) -> None:
        """A new source leads: its steps are not comparable with the old one's."""
        self.durations.clear()
        self._start = None
        self._first_unprofiled_seen = False

    def overhead(self) -> Overhead | None:
        reference = self.durations.get("unprofiled", [])
        recorded = self.durations.get("recorded", [])
        if len(reference) < MIN_REFERENCE_STEPS or not recorded:
            return None
        return Overhead(
            unprofiled_step_ns=float(statistics.median(reference)),
            recorded_step_ns=float(statistics.median(recorded)),
            reference_steps=len(reference),
            recorded_steps=len(recorded),
        )
