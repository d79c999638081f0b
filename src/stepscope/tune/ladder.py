"""The tune loop: measure the program as it is, diagnose it, try the fixes one rung at a time (each in a fresh
child process, building on the fixes kept so far), measure the baseline again, and say what holds it back now."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from stepscope.atomic import write_atomic
from stepscope.capture.program import Program
from stepscope.errors import StepscopeError
from stepscope.model.report import Report, from_json
from stepscope.model.tune import NotTried, PatternShare, Trial, Tune, TuneDevice
from stepscope.tune import review
from stepscope.tune.fixes import FIXES
from stepscope.tune.judge import Rung, judge
from stepscope.tune.plan import Candidate, PlanOptions, make_plan
from stepscope.tune.stats import summarize
from stepscope.tune.suggest import suggest
from stepscope.tune.trial import ChildRun, run_child
from stepscope.tune.wire import ChildResult, DeviceInfo, TrialSpec
from stepscope.version import __version__

ABORT_RATIO = 3.0  # a trial whose steps take 3x the rung it builds on is stopped: the answer is known
MIN_TRIAL_TIMEOUT_S = 120.0
TRIAL_TIMEOUT_FACTOR = 5.0  # x the baseline's own run time
PATCH = "suggested.patch"
COMPILE_WARMUP = 2


@dataclass(frozen=True)
class TuneOptions:
    budget_s: float = 600.0
    max_trials: int | None = None
    fixes: tuple[str, ...] | None = None
    skip_fixes: tuple[str, ...] = ()
    trial_steps: int = 20
    warmup_steps: int = 3
    min_seconds: float = 2.0
    trial_timeout_s: float | None = None
    allow_batch_change: bool = False
    batch_size: int | None = None
    seed: int = 0
    final_diagnosis: bool = True


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
        self.tune = Tune(generator=f"stepscope {__version__}", command=self.program.command, device=None,
                         baseline=None, trials=[], applied=[], speedup=None, final_patterns=[], patch=None,
                         not_tried=[], status="running", seed=self.options.seed, budget_s=self.options.budget_s,
                         folder=str(self.folder))
        self.baseline: Rung | None = None
        self.current: Rung | None = None
        self.first_run: ChildRun | None = None
        self._trials_run = 0

    # -- the whole loop --------------------------------------------------------------------------------

    def run(self) -> Tune:
        try:
            self._baseline()
            candidates = self._plan()
            self._ladder(candidates)
            self._last_baseline()
            self._final_diagnosis()
            self._write_patch()
            self.tune.status = "finished"
        except StepscopeError:
            self.tune.status = "failed"
            raise
        except KeyboardInterrupt:
            self.tune.status = "interrupted"
            self.tune.notes.append("interrupted: the table holds the trials finished before")
        finally:
            self.tune.elapsed_s = round(self.elapsed(), 1)
            self._changed()
        return self.tune

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.options.budget_s - self.elapsed()

    def _changed(self) -> None:
        self.tune.elapsed_s = round(self.elapsed(), 1)
        self.events.changed(self.tune)

    # -- children ----------------------------------------------------------------------------------------

    def _spec(self, fixes: dict[str, dict[str, Any]], mode: str = "measure", abort_ns: float | None = None,
              profile_folder: Path | None = None) -> TrialSpec:
        o = self.options
        # Compiled models compile at their second call (the first finds them) and CUDA graphs record at the next
        # ones: two more steps of warm-up.
        warmup = o.warmup_steps + (COMPILE_WARMUP if any(FIXES[f].compiles for f in fixes if f in FIXES) else 0)
        return TrialSpec(target=self.program.target, args=list(self.program.args), module=self.program.module,
                         fixes=fixes, seed=o.seed, mode=mode, warmup=warmup, steps=o.trial_steps,
                         min_seconds=o.min_seconds, abort_step_ns=abort_ns, batch_size=o.batch_size,
                         profile_folder=str(profile_folder) if profile_folder else None)

    def _timeout(self, reserve: float, trial: bool) -> float:
        """A trial's limit is --trial-timeout when given; the baseline and profiled runs always get the default."""
        base = self.first_run.wall_s if self.first_run is not None else 60.0
        limit = max(MIN_TRIAL_TIMEOUT_S, TRIAL_TIMEOUT_FACTOR * base)
        if trial and self.options.trial_timeout_s:
            limit = self.options.trial_timeout_s
        return max(min(limit, self.left() - reserve), 1.0)

    def _child(self, name: str, spec: TrialSpec, reserve: float = 0.0, trial: bool = False) -> ChildRun:
        return run_child(spec, self.folder / "trials", name, self._timeout(reserve, trial))

    # -- the baseline ----------------------------------------------------------------------------------

    def _baseline(self) -> None:
        self.events.phase("baseline: the program as it is, without the profiler")
        run = self._child("00-baseline-first", self._spec({}))
        if run.problem or run.result is None:
            raise StepscopeError(f"{self.program.target}: could not measure the program as it is: {run.problem}",
                                 hint=f"its output is in {run.log}", exit_code=2)
        self.first_run = run
        result = run.result
        stats = summarize(result.step_ns)
        assert stats is not None
        self.baseline = self.current = Rung(0, {}, stats, result.batch_size, result.losses, result.settings)
        self.tune.device = _device(result)
        self.tune.baseline = review.baseline_section([run], [], result)
        self._changed()

    def _diagnose(self, name: str, fixes: dict[str, dict[str, Any]]) -> Report | None:
        folder = self.folder / name
        run = self._child(f"{name}-profile", self._spec(fixes, "profile", profile_folder=folder))
        if run.problem or run.result is None or not run.result.report:
            self.tune.notes.append(f"the {name} diagnosis failed: {run.problem or 'no report'}")
            return None
        try:
            return from_json(Path(run.result.report).read_bytes())
        except (OSError, ValueError, msgspec.DecodeError) as exc:
            self.tune.notes.append(f"the {name} diagnosis could not be read: {exc}")
            return None

    def _plan(self) -> list[Candidate]:
        self.events.phase("diagnosis: one profiled window, as stepscope run")
        report = self._diagnose("baseline", {})
        assert self.first_run is not None and self.first_run.result is not None and self.tune.baseline is not None
        if report is not None:
            self.tune.baseline.patterns = _patterns(report)
            self.tune.baseline_report = "baseline/report.json"
        o = self.options
        plan = make_plan(report, self.first_run.result.settings, self.first_run.result.device or _cpu(), PlanOptions(
            only=o.fixes, skip=o.skip_fixes, allow_batch_change=o.allow_batch_change,
            timed_steps=o.warmup_steps + o.trial_steps))
        self.tune.not_tried.extend(plan.not_tried)
        self._changed()
        return plan.candidates

    # -- the ladder ------------------------------------------------------------------------------------

    def _ladder(self, candidates: list[Candidate]) -> None:
        for i, candidate in enumerate(candidates):
            stop = self._stop_reason()
            if stop:
                self._skip(candidates[i:], stop)
                return
            self._try(candidate)

    def _stop_reason(self) -> str:
        if self.options.max_trials is not None and self._trials_run >= self.options.max_trials:
            return f"--max-trials {self.options.max_trials} reached"
        if self.left() < self._reserve() + self._least_trial():
            return "the budget ran out (--budget)"
        return ""

    def _reserve(self) -> float:
        """Time kept for the last baseline run: the first one's, and half again for a machine that slows."""
        return 1.5 * self.first_run.wall_s if self.first_run is not None else 0.0

    def _least_trial(self) -> float:
        return 0.5 * self.first_run.wall_s if self.first_run is not None else 0.0

    def _skip(self, candidates: list[Candidate], reason: str) -> None:
        for c in candidates:
            self.tune.not_tried.append(NotTried(id="+".join(c.fixes), reason=reason, estimated_speedup=c.estimate))
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
            trial = self._run_trial(candidate, {**self.current.fixes, **option}, self.current, start)
            if trial is None:  # stepscope's own patch failed: the fix is untried
                return
            if not trial.accepted:
                if kept is not None or trial.status != "measured":
                    return
                continue
            if kept is not None:
                kept.accepted = False
                kept.reason += f"; superseded by {_params_text(option)}"
            kept = trial

    def _run_trial(self, candidate: Candidate, fixes: dict[str, dict[str, Any]], on: Rung,
                   start: Rung) -> Trial | None:
        assert self.baseline is not None
        self._trials_run += 1
        rung = len(self.tune.trials) + 1
        label = "+".join(candidate.fixes)
        self.events.phase(f"trial {rung}: {label} {_params_text(fixes, candidate.fixes)}".rstrip())
        factor = max((p.get("factor", 1) for f, p in fixes.items() if f == "larger_batch"), default=1)
        spec = self._spec(fixes, abort_ns=ABORT_RATIO * on.stats.median_ns * factor)
        run = self._child(f"{rung:02d}-{label}", spec, reserve=self._reserve(), trial=True)
        if run.status == "stepscope failed":
            self.tune.not_tried.append(NotTried(id=label, reason=f"{run.problem}; its log: trials/{run.log.name}",
                                                estimated_speedup=candidate.estimate))
            self._changed()
            return None
        verdict = judge(run, rung=rung, tried=candidate.fixes, fixes=fixes, base=on, baseline=self.baseline,
                        estimate=candidate.estimate, estimate_from=start)
        self.tune.trials.append(verdict.trial)
        if verdict.trial.accepted and verdict.stats is not None and run.result is not None:
            self.current = Rung(rung, fixes, verdict.stats, run.result.batch_size, run.result.losses,
                                run.result.settings)
        self._changed()
        return verdict.trial

    # -- the end ---------------------------------------------------------------------------------------

    def _last_baseline(self) -> None:
        assert self.first_run is not None and self.baseline is not None
        self.events.phase("baseline again: how much the machine drifted")
        run = self._child("99-baseline-last", self._spec({}))
        assert self.first_run is not None
        review.finish(self.tune, self.first_run, self.baseline, run)
        self._changed()

    def _final_diagnosis(self) -> None:
        applied = self.tune.applied
        if not applied:
            assert self.tune.baseline is not None
            self.tune.final_patterns = list(self.tune.baseline.patterns)
            return
        if not self.options.final_diagnosis or self.left() < self._reserve():
            self.tune.notes.append("no final diagnosis: " + ("turned off" if not self.options.final_diagnosis
                                                             else "the budget ran out"))
            return
        self.events.phase("final diagnosis: one profiled window with the kept fixes")
        report = self._diagnose("final", {k: self.tune.applied_params.get(k, {}) for k in applied})
        if report is not None:
            self.tune.final_patterns = _patterns(report)
            self.tune.final_report = "final/report.json"

    def _write_patch(self) -> None:
        applied, device = self.tune.applied, self.tune.device
        if not applied or self.current is None:
            return
        where = device.name if device else "this machine"
        measured = (f"measured {self.tune.speedup:.2f}x together" if self.tune.speedup
                    else "not measured together (each was measured on the rung it was tried on)")
        header = [f"stepscope tune: kept {', '.join(applied)}, {measured} on {where}"]
        params = {f: self.tune.applied_params.get(f, {}) for f in applied}
        text, unplaced, commands = suggest(params, applied, self.current.settings, device.kind if device else "cpu",
                                           header, str(self.folder / PATCH))
        if text:
            write_atomic(self.folder / PATCH, text, what="patch")
            self.tune.patch = PATCH
            self.tune.patch_apply, self.tune.patch_apply_in = commands, os.getcwd()
        for fix in unplaced:
            self.tune.notes.append(f"{fix} is not in the patch (its place in the code was not found): "
                                   f"{FIXES[fix].code}")


def _patterns(report: Report) -> list[PatternShare]:
    return [PatternShare(id=p.id, share=p.share) for p in report.patterns]


def _params_text(fixes: dict[str, dict[str, Any]], only: tuple[str, ...] | None = None) -> str:
    parts = [f"{k}={v}" for fix, params in fixes.items() if only is None or fix in only for k, v in params.items()]
    return ", ".join(parts)


def _device(result: ChildResult) -> TuneDevice | None:
    d = result.device
    if d is None:
        return None
    return TuneDevice(kind=d.kind, name=d.name, count=d.count, compute_capability=d.compute_capability,
                      total_memory_bytes=d.total_memory_bytes, cpu_cores=d.cpu_cores, torch=d.torch)


def _cpu() -> DeviceInfo:
    return DeviceInfo(kind="cpu", name="CPU")
