"""The tune loop: measure the program as it is, diagnose it, try the fixes one rung at a time (each candidate
measured against the rung it builds on in alternating fresh child processes, kept when its gain's interval clears
the smallest gain worth a change), measure the tuned configuration against the program as it is, and say what
holds it back now."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from stepscope.capture.program import Program
from stepscope.errors import StepscopeError
from stepscope.model.report import Report
from stepscope.model.tune import NotTried, PatternShare, Trial, Tune, TuneDevice
from stepscope.tune import finish, review, story
from stepscope.tune.budget import PROFILE_FACTOR, Budget
from stepscope.tune.fixes import FIXES
from stepscope.tune.judge import Rung, numerics_for, trial_row
from stepscope.tune.measured import Run, config_key, rates
from stepscope.tune.meter_windows import data_share
from stepscope.tune.paired import CANDIDATE
from stepscope.tune.plan import MIN_PHASE_SHARE, PHASE_FIXES, Candidate, PlanOptions, make_plan
from stepscope.tune.rounds import Comparison, Fixes
from stepscope.tune.trial import run_child
from stepscope.tune.wire import ChildResult, DeviceInfo, TrialSpec
from stepscope.version import __version__

ABORT_RATIO = 3.0  # a candidate whose steps take 3x the rung it builds on is stopped: the answer is known


@dataclass(frozen=True)
class TuneOptions:
    budget_s: float = 600.0
    max_trials: int | None = None
    fixes: tuple[str, ...] | None = None
    skip_fixes: tuple[str, ...] = ()
    trial_steps: int = 20  # timed steps per run, at least, over ...
    warmup_steps: int = 3
    min_seconds: float = 2.0  # ... at least this long ...
    windows: int = 3  # ... in this many windows
    trial_timeout_s: float | None = None
    allow_batch_change: bool = False
    batch_size: int | None = None
    seed: int = 0
    final_diagnosis: bool = True
    min_gain: float = 0.05  # a fix is kept when its gain's interval is above 1 + this
    max_rounds: int = 3  # candidate runs per comparison, at most


@dataclass
class Events:
    """What the tune tells whoever shows it: a phase began; the result changed (save it, redraw it)."""

    phase: Callable[[str], None] = lambda text: None
    changed: Callable[[Tune], None] = lambda tune: None


@dataclass
class Tuner:
    program: Program
    options: TuneOptions
    folder: Path
    events: Events = field(default_factory=Events)
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        o = self.options
        self.header = review.Header(generator=f"stepscope {__version__}", command=self.program.command, seed=o.seed,
                                    budget_s=o.budget_s, folder=str(self.folder), min_gain=o.min_gain)
        self.progress = review.Progress()  # what the tune found so far: `tune` is built from it at each change
        self.budget = Budget(o.budget_s, o.trial_timeout_s, started=self.started)
        self.history: list[Run] = []
        self.baseline: Rung | None = None
        self.current: Rung | None = None
        self.labels: dict[str, str] = {config_key({}): "baseline"}
        self._trials_run = 0
        self.tune = self._result()

    # -- the whole loop --------------------------------------------------------------------------------

    def run(self) -> Tune:
        try:
            self._baseline()
            candidates = self._plan()
            self._ladder(candidates)
            self._final()
            self.progress.status = "finished"
        except StepscopeError:
            self.progress.status = "failed"
            raise
        except KeyboardInterrupt:
            self.progress.status = "interrupted"
            self.progress.notes.append("interrupted: the table holds the trials finished before")
        finally:
            self._changed()
        return self.tune

    def elapsed(self) -> float:
        return self.budget.elapsed()

    def _changed(self) -> None:
        self.tune = self._result()
        self.events.changed(self.tune)

    def _result(self) -> Tune:
        """The Tune as it stands, built from what the tune has found (the baseline once it was measured)."""
        baseline_runs = self._runs_of({}) if self.baseline is not None else []
        return review.tune_result(self.header, self.progress, baseline_runs, self.elapsed())

    def _runs_of(self, fixes: Fixes) -> list[Run]:
        key = config_key(fixes)
        return [r for r in self.history if r.key == key]

    # -- children ----------------------------------------------------------------------------------------

    def spec(self, fixes: Fixes, mode: str = "measure", abort_ns: float | None = None,
             profile_folder: Path | None = None) -> TrialSpec:
        o = self.options
        return TrialSpec(target=self.program.target, args=list(self.program.args), module=self.program.module,
                         fixes=fixes, seed=o.seed, mode=mode, warmup=o.warmup_steps, steps=o.trial_steps,
                         min_seconds=o.min_seconds, windows=o.windows, abort_step_ns=abort_ns,
                         batch_size=o.batch_size, profile_folder=str(profile_folder) if profile_folder else None,
                         framework=self.baseline.settings.framework if self.baseline is not None else None)

    def _measure(self, fixes: Fixes, arm: str, *, check_budget: bool = True) -> Run | None:
        """One measured run of a configuration (None when the budget has no room for it and the end)."""
        key = config_key(fixes)
        compiles = any(FIXES[f].compiles for f in fixes if f in FIXES)
        if check_budget and not self.budget.fits(self.budget.expected(key, compiles), self._reserve()):
            return None
        name = f"{len(self.history) + 1:02d}-{self.labels.get(key, 'run')}"
        abort = None
        if arm == CANDIDATE and self.current is not None:
            factor = max((p.get("factor", 1) for f, p in fixes.items() if f == "larger_batch"), default=1)
            abort = ABORT_RATIO * factor / self.current.steps_per_s * 1e9
        self.events.phase(f"run {len(self.history) + 1}: {self.labels.get(key, key)}")
        start = self.elapsed()
        child = run_child(self.spec(fixes, abort_ns=abort), self.folder / "trials", name,
                          self.budget.timeout(key, compiles, trial=bool(fixes)))
        self.budget.ran(key, child.wall_s)
        run = Run(key=key, child=child, at=(start + self.elapsed()) / 2, index=len(self.history))
        self.history.append(run)
        return run

    def _reserve(self) -> float:
        current = self.current
        if current is None or not current.fixes:
            return 0.0
        compiles = any(FIXES[f].compiles for f in current.fixes if f in FIXES)
        return self.budget.reserve(config_key({}), config_key(current.fixes), compiles,
                                   self.options.final_diagnosis)

    # -- the baseline ----------------------------------------------------------------------------------

    def _baseline(self) -> None:
        self.events.phase("baseline: the program as it is, without the profiler")
        run = self._measure({}, "reference", check_budget=False)
        assert run is not None
        if not run.ok or run.child.result is None:
            raise StepscopeError(f"{self.program.target}: could not measure the program as it is: "
                                 f"{run.child.problem or run.child.status}", hint=f"its output is in {run.child.log}",
                                 exit_code=2)
        result = run.child.result
        self.budget.baseline_s = run.child.wall_s
        figures = rates([run], result.batch_size)
        self.baseline = self.current = Rung(0, {}, figures["steps_per_s"] or 0.0, figures["samples_per_s"], 1.0,
                                            result.batch_size, result.losses, result.settings)
        self.progress.device = _device(result)
        self._changed()

    def _plan(self) -> list[Candidate]:
        self.events.phase("diagnosis: one profiled window, as stepscope run")
        report = self._diagnose("baseline", {})
        first = self.history[0].child.result
        assert first is not None and self.baseline is not None
        if report is not None:
            self.progress.patterns = patterns_of(report)
            self.progress.baseline_report = "baseline/report.json"
        o = self.options
        plan = make_plan(report, first.settings, first.device or DeviceInfo(kind="cpu", name="CPU"), PlanOptions(
            only=o.fixes, skip=o.skip_fixes, allow_batch_change=o.allow_batch_change,
            timed_steps=o.warmup_steps + o.trial_steps))
        self.progress.not_tried.extend(plan.not_tried)
        self._changed()
        return plan.candidates

    # -- the ladder ------------------------------------------------------------------------------------

    def _ladder(self, candidates: list[Candidate]) -> None:
        i = 0
        while i < len(candidates):  # the list grows when a kept rung shows a phase its fix shrinks
            stop = self._stop_reason()
            if stop:
                self._skip(candidates[i:], stop)
                return
            self._try(candidates[i])
            candidates[i + 1:i + 1] = self._phase_candidates(candidates)
            i += 1

    def _phase_candidates(self, candidates: list[Candidate]) -> list[Candidate]:
        """The fixes of the phases the step meter shows in the rung the next trial builds on, not planned yet: a wait
        for data that only appears once an earlier fix made the rest of the step shorter gets more workers."""
        assert self.current is not None
        runs = [r.child.result for r in self._runs_of(self.current.fixes) if r.child.result is not None]
        share = data_share([w.phases_s for result in runs for w in result.windows if w.kind == "timed"])
        planned = {f for c in candidates for f in c.fixes} | {f for t in self.progress.trials for f in t.tried}
        fix = PHASE_FIXES["data"]
        if share is None or share < MIN_PHASE_SHARE or fix in planned or fix in self.current.fixes:
            return []
        o = self.options
        if (o.fixes is not None and fix not in o.fixes) or fix in o.skip_fixes:
            return []
        first = self.history[0].child.result
        device = (first.device if first is not None else None) or DeviceInfo(kind="cpu", name="CPU")
        self.events.phase(f"the step meter shows {share:.0%} of the step waiting for data: {fix} added")
        options = PlanOptions(only=(fix,), allow_batch_change=o.allow_batch_change,
                              timed_steps=o.warmup_steps + o.trial_steps)
        return make_plan(None, self.current.settings, device, options).candidates

    def _stop_reason(self) -> str:
        if self.options.max_trials is not None and self._trials_run >= self.options.max_trials:
            return f"--max-trials {self.options.max_trials} reached"
        if not self.budget.fits(2 * self.budget.baseline_s, self._reserve()):
            return "the budget ran out (--budget)"
        return ""

    def _skip(self, candidates: list[Candidate], reason: str) -> None:
        for c in candidates:
            self.progress.not_tried.append(NotTried(id="+".join(c.fixes), reason=reason,
                                                   estimated_speedup=c.estimate))
        self._changed()

    def _try(self, candidate: Candidate) -> None:
        """Each setting in turn (e.g. 2, then 4 workers), building on the last kept, until one after a kept one
        is not kept (past the best). Settings after one not kept are still tried while none was kept: too few
        workers for the load can lose where more win."""
        assert self.current is not None
        loaders = self.current.settings.loaders
        if "persistent_workers" in candidate.fixes and not (loaders and loaders[0].num_workers):
            self._skip([candidate], "needs worker processes, and dataloader_workers was not kept")
            return
        kept: Trial | None = None
        start = self.current
        for option in candidate.options:
            if kept is not None and self._stop_reason():
                return
            trial = self._compare(candidate, option, start)
            if trial is None:  # not tried: stepscope's own failure, or no room for a compilation
                return
            if not trial.accepted:
                if kept is not None or trial.status != "measured":
                    return
                continue
            if kept is not None:  # the row is replaced, not edited: a Trial is built once
                self.progress.trials[kept.rung - 1] = msgspec.structs.replace(
                    kept, accepted=False, reason=f"{kept.reason}; superseded by {_params_text(option)}")
                self._changed()
            kept = trial

    def _compare(self, candidate: Candidate, option: Fixes, start: Rung) -> Trial | None:
        assert self.current is not None
        base = self.current
        fixes = {**base.fixes, **option}
        label = "+".join(candidate.fixes) + "".join(f"-{v}" for p in option.values() for v in p.values()
                                                    if isinstance(v, int))
        self.labels[config_key(fixes)] = label
        compiles = any(FIXES[f].compiles for f in candidate.fixes)
        need = self.budget.expected(config_key(fixes), compiles) + self.budget.expected(config_key(base.fixes), False)
        if not self.budget.fits(need, self._reserve()):
            self._skip([candidate], f"the budget left ({max(self.budget.left(), 0):.0f} s) is less than its runs "
                                    f"may take (~{need:.0f} s{', compilation included' if compiles else ''})")
            return None
        self._trials_run += 1
        rung = len(self.progress.trials) + 1
        self.events.phase(f"trial {rung}: {label}")
        comparison = Comparison(measure=self._measure, history=self.history, min_gain=self.options.min_gain,
                                max_rounds=self.options.max_rounds, seed=self.options.seed, tried=candidate.fixes,
                                check_numerics=lambda run: numerics_for(candidate.fixes, base, run))
        outcome = comparison.run(base.fixes, fixes)
        if outcome.failure is not None and outcome.failure.child.status == "stepscope failed":
            self.progress.not_tried.append(NotTried(
                id="+".join(candidate.fixes), estimated_speedup=candidate.estimate,
                reason=f"{outcome.failure.child.problem}; its log: {outcome.failure.log_name()}"))
            self._changed()
            return None
        trial = trial_row(outcome, rung=rung, tried=candidate.fixes, fixes=fixes, base=base,
                          estimate=candidate.estimate, estimate_from=start, min_gain=self.options.min_gain)
        self.progress.trials.append(trial)
        first = outcome.candidate_runs()[0] if outcome.candidate_runs() else None
        if trial.accepted and first is not None and first.child.result is not None:
            result = first.child.result
            self.current = Rung(rung, fixes, trial.steps_per_s or 0.0, trial.samples_per_s, trial.speedup or 1.0,
                                result.batch_size, result.losses, result.settings)
        self._changed()
        return trial

    # -- the end ---------------------------------------------------------------------------------------

    def _final(self) -> None:
        assert self.current is not None and self.baseline is not None
        self.progress.ended = True
        if not review.kept(self.progress.trials)[0]:
            return  # the speed-up is 1 and the diagnosis the baseline's (review.tune_result)
        self.events.phase("the tuned configuration against the program as it is")
        tuned = self.current
        comparison = Comparison(measure=lambda fixes, arm: self._measure(fixes, arm, check_budget=False),
                                history=self.history, min_gain=self.options.min_gain, max_rounds=1,
                                seed=self.options.seed)
        outcome = comparison.run({}, tuned.fixes)
        final, note = review.final_figures(outcome, tuned.batch_size, bool(self.baseline.samples_per_s))
        self.progress.final = final
        self.progress.notes.extend([note] if note else [])
        self._changed()
        self._final_diagnosis(tuned, [run for arm, run in outcome.runs if arm == CANDIDATE], final.samples_per_s)
        self.progress.patch, unplaced = finish.write_patch(self.tune, tuned.settings, self.folder)
        self.progress.notes.extend(unplaced)

    def _diagnose(self, name: str, fixes: Fixes, spec: TrialSpec | None = None) -> Report | None:
        timeout = self.budget.timeout(config_key(fixes), False, trial=False) * 2
        spec = spec or self.spec(fixes, "profile", profile_folder=self.folder / name)
        return finish.diagnose(spec, self.folder, name, timeout, self.progress.notes)

    def _final_diagnosis(self, tuned: Rung, runs: list[Run], samples_per_s: float | None) -> None:
        if not self.options.final_diagnosis:
            self.progress.notes.append("no final diagnosis: turned off")
            return
        expected = PROFILE_FACTOR * self.budget.expected(config_key(tuned.fixes), False)
        if not self.budget.fits(expected, 0.0):
            self.progress.notes.append("no final diagnosis: the budget ran out")
            return
        self.events.phase("final diagnosis: one profiled window with the kept fixes")
        ladder = story.ladder_entries(self.tune)
        spec = msgspec.structs.replace(self.spec(tuned.fixes, "profile", profile_folder=self.folder / "final"),
                                       ladder=ladder, reference=finish.reference_windows(runs, samples_per_s),
                                       skip=finish.warmup_steps(runs) + 2)
        report = self._diagnose("final", tuned.fixes, spec)
        if report is not None:
            self.progress.final_patterns = patterns_of(report)
            self.progress.final_report = "final/report.json"
            self.progress.final_recommendations = story.final_recommendations(report, ladder)


def patterns_of(report: Report) -> list[PatternShare]:
    return [PatternShare(id=p.id, share=p.share) for p in report.patterns]


def _params_text(fixes: dict[str, dict[str, Any]]) -> str:
    return ", ".join(f"{k}={v}" for params in fixes.values() for k, v in params.items())


def _device(result: ChildResult) -> TuneDevice | None:
    d = result.device
    if d is None:
        return None
    return TuneDevice(kind=d.kind, name=d.name, count=d.count, compute_capability=d.compute_capability,
                      total_memory_bytes=d.total_memory_bytes, cpu_cores=d.cpu_cores, torch=d.torch)
