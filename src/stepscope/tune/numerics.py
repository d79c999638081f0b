"""The numerics guard: a fix that changes arithmetic (precision, kernel choice, fusion, memory layout) is kept only
if the loss it trains to stays finite, agrees with the reference's in the first steps, and keeps its level after.

Training amplifies any difference: on a real run (ResNet-18, SGD with momentum, random labels) a float32 layout
change moved the loss by 1e-7 at step 1, 4e-3 at step 3 and 30% at step 12, on a trajectory as sound as the
reference's. So the losses are compared step by step only in the first steps (EARLY_STEPS: the first includes
a fix applied at the model's first forward, the second the fixes applied from its second call), where the
difference is the fix's own arithmetic; after that, the mean loss over the steps compared must stay within
three standard errors (of the difference of the two means), and never further than needed: a diverging or
broken run moves it far more.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from stepscope.model.tune import Numerics
from stepscope.tune.fixes import FIXES

EARLY_STEPS = 2
TREND_SE = 3.0  # the mean loss may move this many standard errors ...
TREND_MIN = 0.02  # ... and always 2%
TINY = 1e-8


def tolerance_for(fix_ids: Iterable[str]) -> float | None:
    """The tolerance for fixes tried together (the loosest applies); None when none of them changes numerics.

    Each fix holds its own (tune/fixes/): reduced precision rounds every op (bfloat16 keeps 8 bits of mantissa),
    TF32 keeps 10 bits in matmuls only; fusion, layouts and kernel choices reorder float32 sums (rounding only)."""
    found = [t for f in fix_ids if f in FIXES and (t := FIXES[f].tolerance) is not None]
    return max(found) if found else None


def compare_losses(reference: Sequence[float | None], trial: Sequence[float | None], tolerance: float,
                   reference_rung: int = 0) -> Numerics:
    """Finite everywhere; |trial - reference| / |reference| within `tolerance` in the first steps; the mean
    loss within TREND_SE standard errors (at least TREND_MIN) over all the steps both have."""
    bad = next((i for i, v in enumerate(trial) if v is not None and not math.isfinite(v)), None)
    common = {"tolerance": tolerance, "reference": reference_rung}
    if bad is not None:
        return Numerics(ok=False, max_rel_loss_diff=None, detail=f"the loss is {trial[bad]} at step {bad + 1}",
                        **common)
    pairs = [(i + 1, r, t) for i, (r, t) in enumerate(zip(reference, trial, strict=False))
             if r is not None and t is not None and math.isfinite(r)]
    if not pairs:
        return Numerics(ok=True, max_rel_loss_diff=None, detail="no loss was passed to backward in both runs: "
                        "not checked", **common)
    worst = max(abs(t - r) / max(abs(r), TINY) for _, r, t in pairs)
    result = Numerics(ok=True, max_rel_loss_diff=round(worst, 6), steps_compared=len(pairs), **common)
    early = [(abs(t - r) / max(abs(r), TINY), i, r, t) for i, r, t in pairs if i <= EARLY_STEPS]
    early_worst, step, ref, got = max(early) if early else (0.0, 0, 0.0, 0.0)
    result.early_rel_diff = round(early_worst, 6)
    if early_worst > tolerance:
        result.ok = False
        result.detail = (f"the loss differs by {early_worst:.2%} at step {step} (tolerance {tolerance:.0%}): "
                         f"{got:.6g} against {ref:.6g}")
        return result
    moved, limit = _trend([r for _, r, _ in pairs], [t for _, _, t in pairs])
    result.mean_rel_diff, result.mean_limit = round(moved, 6), round(limit, 6)
    if moved > limit:
        result.ok = False
        result.detail = (f"the mean loss over {len(pairs)} steps moved {moved:.1%} (limit {limit:.1%}: "
                         f"{TREND_SE:g} standard errors, at least {TREND_MIN:.0%})")
    return result


def _trend(reference: list[float], trial: list[float]) -> tuple[float, float]:
    """How far the trial's mean loss moved from the reference's, and how far it may, both relative."""
    mean_r, mean_t = statistics.fmean(reference), statistics.fmean(trial)
    n = len(reference)
    se = math.sqrt((statistics.pvariance(reference) + statistics.pvariance(trial)) / n) if n > 1 else 0.0
    scale = max(abs(mean_r), TINY)
    return abs(mean_t - mean_r) / scale, max(TREND_MIN, TREND_SE * se / scale)
