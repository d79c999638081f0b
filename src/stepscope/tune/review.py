"""The tune's result, built in one place: the Tuner records what it found (`Progress`), and `tune_result` builds
the Tune from it each time it is shown or saved: the baseline from its runs, what is kept (the applied fixes and
their settings, from the trials), and the tuned configuration measured against the baseline, interleaved."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stepscope.model.tune import (
    Baseline,
    FinalRecommendation,
    Measurement,
    NotTried,
    PatternShare,
    Trial,
    TrialRun,
    Tune,
    TuneDevice,
)
from stepscope.tune.measured import Run, in_ladder_unit, measurement, rates
from stepscope.tune.numerics import compare_losses
from stepscope.tune.paired import REFERENCE
from stepscope.tune.rounds import Outcome


@dataclass(frozen=True)
class Final:
    """The tuned configuration against the baseline, in alternating runs: the headline."""

    runs: list[TrialRun]
    speedup: float | None = None  # None: not measured (its note says why)
    interval: list[float] | None = None
    windows: int = 0
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    paired_rate: float | None = None
    paired_baseline_rate: float | None = None


@dataclass(frozen=True)
class Patch:
    name: str
    apply: list[str]
    apply_in: str


@dataclass(frozen=True)
class Header:
    """What the tune was asked: set once."""

    generator: str
    command: list[str]
    seed: int
    budget_s: float
    folder: str
    min_gain: float


@dataclass
class Progress:
    """What the tune has found so far, as the Tuner records it; the Tune is built from it (`tune_result`)."""

    status: str = "running"
    device: TuneDevice | None = None
    patterns: list[PatternShare] = field(default_factory=list)  # the baseline's diagnosis
    baseline_report: str | None = None
    trials: list[Trial] = field(default_factory=list)
    not_tried: list[NotTried] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ended: bool = False  # the ladder is done: with nothing kept, the speed-up is 1 and the diagnosis the baseline's
    final: Final | None = None
    final_patterns: list[PatternShare] | None = None
    final_report: str | None = None
    final_recommendations: list[FinalRecommendation] = field(default_factory=list)
    patch: Patch | None = None


def tune_result(header: Header, progress: Progress, baseline_runs: list[Run], elapsed_s: float) -> Tune:
    """The Tune as it stands."""
    applied, applied_params = kept(progress.trials)
    final = progress.final
    nothing_kept = progress.ended and not applied
    baseline = baseline_section(baseline_runs, progress.patterns) if baseline_runs else None
    final_patterns = progress.final_patterns
    if final_patterns is None:
        final_patterns = list(progress.patterns) if nothing_kept else []
    patch = progress.patch
    return Tune(
        generator=header.generator, command=header.command, seed=header.seed, budget_s=header.budget_s,
        folder=header.folder, min_gain=header.min_gain, status=progress.status, elapsed_s=round(elapsed_s, 1),
        device=progress.device, baseline=baseline, baseline_report=progress.baseline_report,
        trials=list(progress.trials), not_tried=list(progress.not_tried), notes=list(progress.notes),
        applied=applied, applied_params=applied_params,
        speedup=1.0 if nothing_kept else final.speedup if final else None,
        speedup_interval=final.interval if final else None, speedup_windows=final.windows if final else 0,
        final_runs=final.runs if final else [], final_samples_per_s=final.samples_per_s if final else None,
        final_steps_per_s=final.steps_per_s if final else None,
        final_paired_rate=final.paired_rate if final else None,
        final_paired_baseline_rate=final.paired_baseline_rate if final else None,
        final_patterns=final_patterns, final_report=progress.final_report,
        final_recommendations=list(progress.final_recommendations),
        patch=patch.name if patch else None, patch_apply=patch.apply if patch else [],
        patch_apply_in=patch.apply_in if patch else None)


def baseline_section(runs: list[Run], patterns: list[PatternShare]) -> Baseline:
    """The program as it is, over every run of it in the tune (their windows pooled)."""
    good = [r for r in runs if r.ok]
    measured: list[Measurement] = [m for m in (measurement(r) for r in good) if m is not None]
    first = good[0].child.result if good else None
    batch = first.batch_size if first is not None else None
    drift = loss_diff = None
    if len(good) >= 2:
        a, b = good[0].rate, good[-1].rate
        drift = round(abs(a - b) / ((a + b) / 2), 4)
        last = good[-1].child.result
        if first is not None and last is not None:
            loss_diff = compare_losses(first.losses, last.losses, tolerance=1.0).max_rel_loss_diff
    return Baseline(**rates(good, batch), spread=None, runs=measured, patterns=list(patterns),
                    step_source=first.step_source if first else None, batch_size=batch, drift=drift,
                    max_rel_loss_diff=loss_diff)


def kept(trials: list[Trial]) -> tuple[list[str], dict[str, Any]]:
    """The fixes kept (each kept rung's) and their settings."""
    params: dict[str, Any] = {}
    for t in trials:
        if t.accepted:
            for fix in t.tried:
                params[fix] = t.params.get(fix, {})
    return list(params), {k: v for k, v in params.items() if v}


def final_figures(outcome: Outcome, batch: int | None, samples_known: bool) -> tuple[Final, str | None]:
    """The tuned configuration against the baseline: the headline speed-up with its interval and throughput, or a
    note saying why there is none."""
    tuned = [run for arm, run in outcome.runs if arm != REFERENCE]
    runs = [run.trial_run(arm) for arm, run in outcome.runs]
    if outcome.gain is None or not tuned:
        return Final(runs=runs), ("the tuned configuration was not measured against the baseline: "
                                  f"{outcome.stopped or 'its run failed'}")
    g = outcome.gain
    batch = tuned[0].child.result.batch_size if tuned[0].child.result else batch
    figures = rates(tuned, batch)
    rate, reference = in_ladder_unit(g, tuned[0], batch, samples_known)
    return Final(runs=runs, speedup=round(g.ratio, 4), interval=[round(g.low, 4), round(g.high, 4)],
                 windows=g.windows, samples_per_s=figures["samples_per_s"], steps_per_s=figures["steps_per_s"],
                 paired_rate=rate, paired_baseline_rate=reference), None
