"""Judging a trial against the rung it builds on: faster beyond the noise band, numerics intact, or why not."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stepscope.model.tune import Measurement, Numerics, Trial
from stepscope.tune.fixes import FIXES
from stepscope.tune.numerics import compare_losses, tolerance_for
from stepscope.tune.stats import StepStats, noise_band, ratio_spread, summarize
from stepscope.tune.trial import ChildRun
from stepscope.tune.wire import Settings


@dataclass
class Rung:
    """A measured configuration others build on: the baseline (index 0) or a kept trial."""

    index: int
    fixes: dict[str, dict[str, Any]]
    stats: StepStats
    batch_size: int | None
    losses: list[float | None] = field(default_factory=list)
    settings: Settings = field(default_factory=Settings)

    def per_sample_ns(self, batch: int | None) -> float:
        """Step time scaled to the same samples as a batch of `batch` (step time when batches are unknown)."""
        if self.batch_size and batch:
            return self.stats.median_ns * batch / self.batch_size
        return self.stats.median_ns


def measurement(run: ChildRun) -> Measurement | None:
    result = run.result
    stats = summarize(result.step_ns) if result is not None else None
    if result is None or stats is None:
        return None
    return Measurement(**_rates(stats, result.batch_size), spread=round(stats.spread, 4), steps=stats.n,
                       batch_size=result.batch_size, timing=result.timing, wall_s=round(run.wall_s, 2))


def _rates(stats: StepStats, batch: int | None) -> dict[str, float | None]:
    per_s = 1e9 / stats.median_ns
    return {"step_time_us": round(stats.median_ns / 1e3, 3), "steps_per_s": round(per_s, 4),
            "samples_per_s": round(per_s * batch, 2) if batch else None}


def slow_stats(run: ChildRun) -> StepStats | None:
    """A trial stopped early for being far slower: its steps after the first, warm-up ones included."""
    if run.result is None:
        return None
    return summarize(run.result.step_ns) or summarize(run.result.warmup_ns[1:])


@dataclass(frozen=True)
class Verdict:
    trial: Trial
    stats: StepStats | None


def judge(run: ChildRun, *, rung: int, tried: tuple[str, ...], fixes: dict[str, dict[str, Any]],
          base: Rung, baseline: Rung, estimate: float | None, estimate_from: Rung | None = None,
          drift: float = 0.0) -> Verdict:
    """The trial row for `run`, which added `tried` to `base`. The estimate is about the fix added to
    `estimate_from` (the rung before the fix's first setting; `base` unless a setting is tried after another)."""
    result = run.result
    stats = slow_stats(run) if run.status == "slower" else (summarize(result.step_ns) if result else None)
    batch = result.batch_size if result is not None else None
    row: dict[str, Any] = {
        "rung": rung, "fixes": list(fixes), "tried": list(tried), "params": {k: v for k, v in fixes.items() if v},
        "builds_on": base.index, "estimated_speedup": estimate, "exit_code": run.returncode, "status": run.status,
        "steps": stats.n if stats else 0, "batch_size": batch, "wall_s": round(run.wall_s, 2),
        "log": f"{run.log.parent.name}/{run.log.name}", "numerics": None, "compile_s": None,
        "step_time_us": None, "steps_per_s": None, "samples_per_s": None, "speedup": None, "spread": None,
        "gain": None, "accepted": False,
    }
    if estimate:
        start = estimate_from or base
        per_s = 1e9 / start.stats.median_ns
        row["estimated_steps_per_s"] = round(per_s * estimate, 4)
        row["estimated_samples_per_s"] = round(per_s * start.batch_size * estimate, 2) if start.batch_size else None
    not_applied = [f for f in tried if result is not None and not result.applied.get(f)]
    if run.problem or stats is None:
        row["reason"] = run.problem or "nothing was timed"
        return Verdict(Trial(**row), None)
    row.update(_rates(stats, batch))
    row["speedup"] = round(baseline.per_sample_ns(batch) / stats.median_ns, 4)
    row["spread"] = round(ratio_spread(baseline.stats, stats), 4)  # the speed-up's relative standard error
    gain = base.per_sample_ns(batch) / stats.median_ns
    row["gain"] = round(gain, 4)
    if any(FIXES[f].compiles or FIXES[f].autotunes for f in tried if f in FIXES) and result is not None:
        row["compile_s"] = round(sum(max(w - stats.median_ns, 0.0) for w in result.warmup_ns) / 1e9, 2)
    if run.status == "slower":
        row["reason"] = (f"slower: {gain:.2f}x, steps of {stats.median_ns / 1e6:,.1f} ms against "
                         f"{base.stats.median_ns / 1e6:,.1f} ms; stopped early")
        return Verdict(Trial(**row), stats)
    if not_applied and len(not_applied) == len(tried):
        row["status"] = "not applied"
        row["reason"] = f"{', '.join(not_applied)} found nothing to change in this program"
        return Verdict(Trial(**row), stats)
    numerics = _numerics(tried, base, result.losses if result else [], batch)
    row["numerics"] = numerics
    band = noise_band(base.stats, stats, drift)
    accepted, reason = decide(gain, band, numerics)
    if not_applied:
        reason += f" ({', '.join(not_applied)} found nothing to change)"
    row["accepted"], row["reason"] = accepted, reason
    return Verdict(Trial(**row), stats)


def _numerics(tried: tuple[str, ...], base: Rung, losses: list[float | None], batch: int | None) -> Numerics | None:
    tolerance = tolerance_for(tried)
    if tolerance is None:
        return None
    if base.batch_size and batch and base.batch_size != batch:
        return Numerics(ok=True, max_rel_loss_diff=None, tolerance=tolerance, reference=base.index,
                        detail="the batch changed: losses are not comparable step by step")
    return compare_losses(base.losses, losses, tolerance, base.index)


def decide(gain: float, band: float, numerics: Numerics | None) -> tuple[bool, str]:
    """Kept only when faster by more than the noise band and the numerics hold."""
    if gain <= 1 - band:
        return False, f"slower: {gain:.2f}x"
    if gain <= 1 + band:
        return False, f"within noise: {gain:.2f}x (noise band ±{band:.0%})"
    if numerics is not None and not numerics.ok:
        return False, f"numerics changed: {numerics.detail}"
    return True, f"faster: {gain:.2f}x (noise band ±{band:.0%})"
