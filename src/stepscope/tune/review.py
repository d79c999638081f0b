"""The tune's own figures: the baseline from its runs, what is kept (the applied fixes and their settings), and the
tuned configuration measured against the baseline, interleaved, for the headline."""

from __future__ import annotations

from typing import Any

from stepscope.model.tune import Baseline, Measurement, PatternShare, Tune
from stepscope.tune.measured import Run, measurement, rates
from stepscope.tune.numerics import compare_losses
from stepscope.tune.paired import REFERENCE
from stepscope.tune.rounds import Outcome


def baseline_section(runs: list[Run], patterns: list[PatternShare]) -> Baseline:
    """The program as it is, over every run of it in the tune (their windows pooled)."""
    good = [r for r in runs if r.ok]
    measured: list[Measurement] = [m for m in (measurement(r) for r in good) if m is not None]
    first = good[0].child.result if good else None
    batch = first.batch_size if first is not None else None
    section = Baseline(**rates(good, batch), spread=None, runs=measured, patterns=patterns,
                       step_source=first.step_source if first else None, batch_size=batch)
    if len(good) >= 2:
        a, b = good[0].rate, good[-1].rate
        section.drift = round(abs(a - b) / ((a + b) / 2), 4)
        last = good[-1].child.result
        if first is not None and last is not None:
            section.max_rel_loss_diff = compare_losses(first.losses, last.losses, tolerance=1.0).max_rel_loss_diff
    return section


def settle(tune: Tune) -> None:
    """The fixes kept (each kept rung's) and their settings."""
    params: dict[str, Any] = {}
    for t in tune.trials:
        if t.accepted:
            for fix in t.tried:
                params[fix] = t.params.get(fix, {})
    tune.applied = list(params)
    tune.applied_params = {k: v for k, v in params.items() if v}


def final_figures(tune: Tune, outcome: Outcome, batch: int | None) -> None:
    """The tuned configuration against the baseline: the headline speed-up with its interval and throughput."""
    tuned = [run for arm, run in outcome.runs if arm != REFERENCE]
    tune.final_runs = [run.trial_run(arm) for arm, run in outcome.runs]
    if outcome.gain is None or not tuned:
        tune.speedup = None
        tune.notes.append(f"the tuned configuration was not measured against the baseline: "
                          f"{outcome.stopped or 'its run failed'}")
        return
    g = outcome.gain
    tune.speedup = round(g.ratio, 4)
    tune.speedup_interval = [round(g.low, 4), round(g.high, 4)]
    tune.speedup_windows = g.windows
    figures = rates(tuned, tuned[0].child.result.batch_size if tuned[0].child.result else batch)
    tune.final_samples_per_s, tune.final_steps_per_s = figures["samples_per_s"], figures["steps_per_s"]
