"""One comparison: a candidate configuration against the rung it builds on, in runs that alternate (reference,
candidate, reference, ...) until the gain's interval decides or the rounds or the budget run out.

A run of either configuration that just ran is reused as the first of the sequence. The gain is evaluated after
each reference run, so every candidate run has a reference run after it (and before it, but for a reused first
candidate run); the candidate's first run is checked for numerics against the reference's losses before more is
spent on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stepscope.model.tune import Numerics, TrialDecision
from stepscope.tune.measured import Run, config_key, same_config_pairs
from stepscope.tune.paired import (
    CANDIDATE,
    DROP,
    KEEP,
    MIN_RUNS,
    REFERENCE,
    UNDECIDED,
    Gain,
    decide,
    gain,
    run_noise,
)

Fixes = dict[str, dict[str, Any]]


@dataclass
class Outcome:
    decision: TrialDecision  # model/tune.py says what each means
    gain: Gain | None = None
    runs: list[tuple[str, Run]] = field(default_factory=list)  # (arm, run) in the order they ran
    failure: Run | None = None  # the candidate's run that failed
    numerics: Numerics | None = None
    stopped: str = ""  # why measuring stopped while undecided

    def candidate_runs(self) -> list[Run]:
        return [r for arm, r in self.runs if arm == CANDIDATE]


@dataclass
class Comparison:
    measure: Callable[[Fixes, str], Run | None]  # runs a configuration (None: no time left for it)
    history: list[Run]  # every measured run of the tune, in order (the runs made here are added)
    min_gain: float
    max_rounds: int
    check_numerics: Callable[[Run], Numerics | None] = lambda run: None
    seed: int = 0
    tried: tuple[str, ...] = ()  # the fixes the candidate adds: one of them must have changed something

    def run(self, reference: Fixes, candidate: Fixes) -> Outcome:
        ref_key, cand_key = config_key(reference), config_key(candidate)
        outcome = Outcome(UNDECIDED)
        last = self.history[-1] if self.history else None
        if last is not None and last.ok and last.key in (ref_key, cand_key):
            outcome.runs.append((REFERENCE if last.key == ref_key else CANDIDATE, last))
            if last.key == cand_key and self._first_candidate(outcome, last):
                return outcome
        while True:
            arm = REFERENCE if not outcome.runs or outcome.runs[-1][0] == CANDIDATE else CANDIDATE
            if arm == CANDIDATE and len(outcome.candidate_runs()) >= self.max_rounds:
                outcome.stopped = f"still undecided after {self.max_rounds} rounds"
                return outcome
            run = self.measure(candidate if arm == CANDIDATE else reference, arm)
            if run is None:
                outcome.stopped = "the budget ran out"
                return outcome
            if not run.ok:
                if arm == CANDIDATE:
                    outcome.decision, outcome.failure = "failed", run
                else:
                    outcome.stopped = f"the reference's run failed ({run.child.problem})"
                return outcome
            outcome.runs.append((arm, run))
            if arm == CANDIDATE and len(outcome.candidate_runs()) == 1 and self._first_candidate(outcome, run):
                return outcome
            if arm == REFERENCE and outcome.candidate_runs():
                outcome.gain = self.evaluate(outcome)
                if outcome.gain is not None:
                    outcome.decision = decide(outcome.gain, self.min_gain, min(MIN_RUNS, self.max_rounds))
                    if outcome.decision in (KEEP, DROP):
                        return outcome

    def _first_candidate(self, outcome: Outcome, run: Run) -> bool:
        """The candidate's first run decides before more is spent on it: whether its fixes changed anything (the
        one place "not applied" is decided), then its numerics. True when that ends the comparison."""
        applied = run.child.result.applied if run.child.result is not None else {}
        if self.tried and not any(applied.get(f) for f in self.tried):
            outcome.decision = "not applied"  # nothing was changed: no more runs of the same program
            return True
        outcome.numerics = self.check_numerics(run)
        if outcome.numerics is not None and not outcome.numerics.ok:
            outcome.decision = "numerics"
            return True
        return False

    def evaluate(self, outcome: Outcome) -> Gain | None:
        noise = run_noise(same_config_pairs(self.history))
        return gain([run.series(arm) for arm, run in outcome.runs], noise, seed=self.seed)
