"""A comparison's outcome as the ladder's row: the trial's throughput, its gain over the rung it builds on with the
interval, kept or not and why, its numerics and compile time."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from stepscope.model.tune import Numerics, Trial
from stepscope.tune.fixes import FIXES
from stepscope.tune.measured import Run, in_ladder_unit, rates
from stepscope.tune.numerics import compare_losses, tolerance_for
from stepscope.tune.paired import DROP, KEEP, Gain
from stepscope.tune.rounds import Outcome
from stepscope.tune.wire import Settings


@dataclass
class Rung:
    """A measured configuration others build on: the baseline (index 0) or a kept trial."""

    index: int
    fixes: dict[str, dict[str, Any]]
    steps_per_s: float  # its throughput where it was measured
    samples_per_s: float | None
    speedup: float  # against the baseline: the gains of the rungs below it, times its own
    batch_size: int | None
    losses: list[float | None] = field(default_factory=list)
    settings: Settings = field(default_factory=Settings)


def numerics_for(tried: tuple[str, ...], base: Rung, run: Run) -> Numerics | None:
    """The candidate's losses against the rung's, for fixes that change arithmetic (None for the others)."""
    tolerance = tolerance_for(tried)
    result = run.child.result
    if tolerance is None or result is None:
        return None
    if base.batch_size and result.batch_size and base.batch_size != result.batch_size:
        return Numerics(ok=True, max_rel_loss_diff=None, tolerance=tolerance, reference=base.index,
                        detail="the batch changed: losses are not comparable step by step")
    return compare_losses(base.losses, result.losses, tolerance, base.index)


def trial_row(outcome: Outcome, *, rung: int, tried: tuple[str, ...], fixes: dict[str, dict[str, Any]], base: Rung,
              estimate: float | None, estimate_from: Rung | None, min_gain: float) -> Trial:
    """The trial row: what was measured, and the decision with its reason (decided in `rounds`, said here)."""
    runs = outcome.candidate_runs()
    shown = runs[0] if runs else outcome.failure
    result = shown.child.result if shown is not None else None
    batch = result.batch_size if result is not None else None
    accepted = outcome.decision == KEEP
    start = estimate_from or base
    g = outcome.gain
    measured = rates(runs, batch) if runs else {}
    paired = in_ladder_unit(g, runs[0], batch, bool(base.samples_per_s)) if g and runs else (None, None)
    return Trial(
        rung=rung, fixes=list(fixes), tried=list(tried), params={k: v for k, v in fixes.items() if v},
        builds_on=base.index, estimated_speedup=estimate, numerics=outcome.numerics,
        exit_code=shown.child.returncode if shown else None,
        status="not applied" if outcome.decision == "not applied" else shown.child.status if shown else "measured",
        steps=sum(r.steps for r in runs), batch_size=batch, wall_s=round(sum(r.child.wall_s for r in runs), 2),
        log=shown.log_name() if shown else None,
        step_time_us=measured.get("step_time_us"), steps_per_s=measured.get("steps_per_s"),
        samples_per_s=measured.get("samples_per_s"),
        accepted=accepted, decision=outcome.decision, reason=_reason_with_notes(outcome, base, min_gain, tried, fixes),
        runs=[run.trial_run(arm) for arm, run in outcome.runs], windows=sum(len(r.windows) for r in runs),
        estimated_steps_per_s=round(start.steps_per_s * estimate, 4) if estimate else None,
        estimated_samples_per_s=round(start.samples_per_s * estimate, 2) if estimate and start.samples_per_s
        else None,
        warmup_s=result.warmup_s if result is not None else None,
        compile_s=result.compile_s if result is not None else None,
        gain=round(g.ratio, 4) if g else None, interval=[round(g.low, 4), round(g.high, 4)] if g else None,
        confidence=g.confidence if g else None, speedup=round(base.speedup * g.ratio, 4) if g else None,
        spread=round(_relative_se(g), 4) if g else None,
        paired_rate=paired[0], paired_reference_rate=paired[1])


def _reason_with_notes(outcome: Outcome, base: Rung, min_gain: float, tried: tuple[str, ...],
                       fixes: dict[str, dict[str, Any]]) -> str:
    """The reason, with the kept fixes' notes and the tried fixes that found nothing to change."""
    text = reason(outcome, base, min_gain, tried)
    if outcome.decision == KEEP:
        for fix_id in tried:
            note = FIXES[fix_id].kept_note if fix_id in FIXES else None
            if note is not None:
                text += f"; {note(fixes.get(fix_id, {}))}"
    runs = outcome.candidate_runs()
    result = runs[0].child.result if runs else None
    idle = [f for f in tried if result is not None and not result.applied.get(f)]
    if idle and outcome.decision != "not applied":
        text += f" ({', '.join(idle)} found nothing to change)"
    return text


def _relative_se(g: Gain) -> float:
    """The gain's relative standard error, from its interval (normal in the log)."""
    z = 1.959964 if abs(g.confidence - 0.95) < 1e-9 else 1.644854
    return (math.log(g.high) - math.log(g.low)) / (2 * z)


def reason(outcome: Outcome, base: Rung, min_gain: float, tried: tuple[str, ...] = ()) -> str:
    """Why kept or not, with the measured gain and its interval: 'faster: 1.72x (1.55-1.90, 6 windows)'."""
    g = outcome.gain
    if outcome.decision == "failed" and outcome.failure is not None:
        child = outcome.failure.child
        if child.status == "slower":
            return f"slower: its steps took over 3x those of rung {base.index}; stopped early"
        return child.problem or "nothing was timed"
    if outcome.decision == "numerics" and outcome.numerics is not None:
        return f"numerics changed: {outcome.numerics.detail}"
    if outcome.decision == "not applied":
        return f"{', '.join(tried) + ' ' if tried else ''}found nothing to change in this program"
    if g is None:
        return f"not measured against rung {base.index}: {outcome.stopped or 'no run of it completed'}"
    bar = f"needs > {1 + min_gain:.2f}x"
    if outcome.decision == KEEP:
        return f"faster: {g.text()}"
    if outcome.decision == DROP:
        return f"slower: {g.text()}" if g.high < 1 else f"no gain worth a change: {g.text()}; {bar}"
    return f"undecided, not kept: {g.text()}; {bar}, {outcome.stopped}"

