"""The numerics guard: a fix that changes arithmetic (precision, kernel choice, fusion, memory layout) is kept only
if the loss it trains to stays finite and close to the reference's at the same step (same seed, same data)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from stepscope.model.tune import Numerics

# Largest relative loss difference, over the steps compared, each fix may make. Reduced precision rounds every
# op (bfloat16 keeps 8 bits of mantissa), so its losses drift apart most; TF32 keeps 10 bits in matmuls only;
# fusion, layouts and kernel choices reorder float32 sums, which moves the loss by rounding only.
TOLERANCE = {
    "amp": 0.05,
    "tf32": 0.02,
    "torch_compile": 0.01,
    "cuda_graphs": 0.01,
    "channels_last": 0.01,
    "cudnn_benchmark": 0.01,
}
TINY = 1e-8


def tolerance_for(fix_ids: Iterable[str]) -> float | None:
    """The tolerance for fixes tried together (the loosest applies); None when none of them changes numerics."""
    found = [TOLERANCE[f] for f in fix_ids if f in TOLERANCE]
    return max(found) if found else None


def compare_losses(reference: Sequence[float | None], trial: Sequence[float | None], tolerance: float,
                   reference_rung: int = 0) -> Numerics:
    """Per step: |trial - reference| / |reference|; any non-finite trial loss fails."""
    bad = next((i for i, v in enumerate(trial) if v is not None and not math.isfinite(v)), None)
    if bad is not None:
        return Numerics(ok=False, max_rel_loss_diff=None, steps_compared=0, tolerance=tolerance,
                        reference=reference_rung, detail=f"the loss is {trial[bad]} at step {bad + 1}")
    pairs = [(i + 1, r, t) for i, (r, t) in enumerate(zip(reference, trial, strict=False))
             if r is not None and t is not None and math.isfinite(r)]
    if not pairs:
        return Numerics(ok=True, max_rel_loss_diff=None, steps_compared=0, tolerance=tolerance,
                        reference=reference_rung, detail="no loss was passed to backward in both runs: not checked")
    worst, step, ref, got = max((abs(t - r) / max(abs(r), TINY), i, r, t) for i, r, t in pairs)
    ok = worst <= tolerance
    detail = "" if ok else (f"the loss differs by {worst:.1%} at step {step} (tolerance {tolerance:.0%}): "
                            f"{got:.6g} against {ref:.6g}")
    return Numerics(ok=ok, max_rel_loss_diff=round(worst, 6), steps_compared=len(pairs), tolerance=tolerance,
                    reference=reference_rung, detail=detail)
