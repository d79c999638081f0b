"""The end of a tune: the baseline from both its runs, the noise band with the machine's drift counted, the trials
re-read against it, and what is kept (the applied fixes and the measured speed-up of the tuned configuration)."""

from __future__ import annotations

from typing import Any

from stepscope.model.tune import Baseline, Measurement, PatternShare, Trial, Tune
from stepscope.tune.judge import Rung, measurement
from stepscope.tune.numerics import compare_losses
from stepscope.tune.stats import MIN_BAND, drift, summarize
from stepscope.tune.trial import ChildRun
from stepscope.tune.wire import ChildResult


def baseline_section(runs: list[ChildRun], patterns: list[PatternShare], first: ChildResult) -> Baseline:
    steps = [d for r in runs if r.result is not None for d in r.result.step_ns]
    stats = summarize(steps)
    measured: list[Measurement] = [m for m in (measurement(r) for r in runs) if m is not None]
    batch = first.batch_size
    per_s = 1e9 / stats.median_ns if stats else None
    return Baseline(
        step_time_us=round(stats.median_ns / 1e3, 3) if stats else None,
        steps_per_s=round(per_s, 4) if per_s else None,
        samples_per_s=round(per_s * batch, 2) if per_s and batch else None,
        spread=round(stats.se, 4) if stats else None, runs=measured, patterns=patterns,
        step_source=first.step_source, batch_size=batch)


def finish(tune: Tune, first: ChildRun, baseline: Rung, last: ChildRun) -> None:
    """Fold the last baseline run in, re-read the trials against the pooled baseline, and settle what is kept."""
    assert first.result is not None and tune.baseline is not None
    runs = [first] if last.problem or last.result is None else [first, last]
    if len(runs) == 1:
        tune.notes.append(f"the last baseline run failed ({last.problem}): the noise band has no drift measured")
    section = baseline_section(runs, tune.baseline.patterns, first.result)
    stats = summarize([d for r in runs for d in r.result.step_ns])  # type: ignore[union-attr]
    first_stats = summarize(first.result.step_ns)
    moved = drift(first_stats, summarize(last.result.step_ns)) if len(runs) == 2 else 0.0  # type: ignore[arg-type]
    section.drift = round(moved, 4)
    section.noise_band = round(max(MIN_BAND, moved), 4)
    if len(runs) == 2:
        numerics = compare_losses(first.result.losses, last.result.losses, tolerance=1.0)  # type: ignore[union-attr]
        section.max_rel_loss_diff = numerics.max_rel_loss_diff
    tune.baseline = section
    if stats is not None:
        baseline.stats = stats
        _reread(tune.trials, baseline.stats, baseline.batch_size, moved)
    _settle(tune)


def _reread(trials: list[Trial], baseline: Any, batch: int | None, moved: float) -> None:
    """Speed-ups against the pooled baseline (a trial's gain stays the one measured against the rung it was
    compared with, the first baseline run for the first rungs); a kept gain inside the drift is no longer kept.

    The drift is spread over the tune: the baseline's two runs are len(trials) + 1 runs apart, and a trial
    compared with the rung just before it is exposed to that share of the drift, not all of it."""
    runs_apart = len(trials) + 1
    for t in trials:
        if t.step_time_us is None:
            continue
        ns = t.step_time_us * 1e3
        scale = (t.batch_size / batch) if t.batch_size and batch else 1.0
        t.speedup = round(baseline.median_ns * scale / ns, 4)  # the gain stays what was decided on
        exposed = pair_drift(moved, t.rung - t.builds_on, runs_apart)
        if t.accepted and t.gain is not None and exposed > MIN_BAND and t.gain <= 1 + exposed:
            t.accepted = False
            t.reason = (f"within noise: {t.gain:.2f}x, and the baseline itself moved {moved:.0%} over the tune, "
                        f"~{exposed:.0%} over the {t.rung - t.builds_on} runs between this one and rung "
                        f"{t.builds_on}")
            _reinstate(trials, t, moved, runs_apart)


def pair_drift(moved: float, runs_between: int, runs_apart: int) -> float:
    """The drift two runs `runs_between` apart are exposed to, when the baseline moved by `moved` over
    `runs_apart` runs (taken as spread evenly over them)."""
    return moved * min(max(runs_between, 1), runs_apart) / max(runs_apart, 1)


def _reinstate(trials: list[Trial], dropped: Trial, moved: float, runs_apart: int) -> None:
    """A setting superseded by one now dropped (2 workers, then 4 within the noise) is kept again if it holds."""
    before = next((t for t in trials if t.rung == dropped.builds_on), None)
    if before is None or before.tried != dropped.tried or "; superseded by" not in before.reason:
        return
    if before.gain is not None and before.gain > 1 + pair_drift(moved, before.rung - before.builds_on, runs_apart):
        before.accepted = True
        before.reason = before.reason.split("; superseded by")[0]


def _settle(tune: Tune) -> None:
    kept = [t for t in tune.trials if t.accepted]
    params: dict[str, Any] = {}
    for t in kept:
        for fix in t.tried:
            params[fix] = t.params.get(fix, {})
    tune.applied = list(params)
    tune.applied_params = {k: v for k, v in params.items() if v}
    if not kept:
        tune.speedup = 1.0
        return
    last = kept[-1]
    if set(last.fixes) == set(tune.applied) and all(last.params.get(f, {}) == p for f, p in params.items()):
        tune.speedup = last.speedup
        return
    tune.speedup = None
    tune.notes.append("a fix kept during the ladder fell within the noise once the baseline's drift was counted; "
                      "no run measured the remaining fixes together, so there is no overall speed-up")
