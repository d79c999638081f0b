"""Time in a tune: how long a run of a configuration is expected to take, its time limit, and whether the budget
still has room for it and for the end of the tune (the tuned configuration against the baseline, the final
diagnosis).

A configuration that compiles pays its compilation in every run (each is a fresh process): before its first run
its limit leaves COMPILE_ALLOWANCE_S for it, and a compiling trial is not started with less than COMPILE_MIN_S
of budget for its compilation (the H100 tune that gave CUDA graphs 28 s timed them out while compiling). After a
run, the configuration's own longest run is what the next one is expected to take.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

MIN_TRIAL_TIMEOUT_S = 120.0
TRIAL_TIMEOUT_FACTOR = 5.0  # x the baseline's own run time, for a configuration not run yet
KNOWN_TIMEOUT_FACTOR = 3.0  # x the configuration's longest run
COMPILE_ALLOWANCE_S = 300.0  # room for a first compilation in a run's limit
COMPILE_MIN_S = 60.0  # budget a compiling configuration's first run needs beyond an ordinary run
UNKNOWN_FACTOR = 1.2  # a configuration not run yet is expected to take this x the baseline's run
PROFILE_FACTOR = 1.5  # a profiled run (the final diagnosis) against a measured one


@dataclass
class Budget:
    total_s: float
    trial_timeout_s: float | None = None  # --trial-timeout: the limit of a trial's runs (compilation aside)
    started: float = field(default_factory=time.monotonic)
    walls: dict[str, float] = field(default_factory=dict)  # configuration key -> its longest run
    baseline_s: float = 60.0  # the baseline's first run

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.total_s - self.elapsed()

    def ran(self, key: str, wall_s: float) -> None:
        self.walls[key] = max(self.walls.get(key, 0.0), wall_s)

    def expected(self, key: str, compiles: bool) -> float:
        if key in self.walls:
            return self.walls[key]
        return UNKNOWN_FACTOR * self.baseline_s + (COMPILE_MIN_S if compiles else 0.0)

    def timeout(self, key: str, compiles: bool, trial: bool) -> float:
        """A run's limit: --trial-timeout for a trial's runs when given, else from the runs seen; with room for a
        first compilation."""
        if key in self.walls:
            limit = max(MIN_TRIAL_TIMEOUT_S, KNOWN_TIMEOUT_FACTOR * self.walls[key])
            return min(limit, self.trial_timeout_s) if trial and self.trial_timeout_s else limit
        limit = max(MIN_TRIAL_TIMEOUT_S, TRIAL_TIMEOUT_FACTOR * self.baseline_s)
        if trial and self.trial_timeout_s:
            limit = self.trial_timeout_s
        return limit + (COMPILE_ALLOWANCE_S if compiles else 0.0)

    def fits(self, need_s: float, reserve_s: float) -> bool:
        return self.left() - reserve_s >= need_s

    def reserve(self, baseline_key: str, tuned_key: str | None, tuned_compiles: bool, diagnosis: bool) -> float:
        """Kept for the end: a run of the baseline and one of the tuned configuration, and the final diagnosis."""
        if tuned_key is None:
            return 0.0
        tuned = self.expected(tuned_key, tuned_compiles)
        return self.expected(baseline_key, False) + tuned + (PROFILE_FACTOR * tuned if diagnosis else 0.0)
