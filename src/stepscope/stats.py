"""One statistics model for every layer: how far one step strays from the typical one (`spread`), how much a mean
of steps moves from run to run (`mean_noise`), whether two figures differ beyond their noise (`beyond_noise`),
and whether steps are still getting faster (`warming`). The step meter, the pipeline, tune, diff, watch, the page
and the LSP all ask here, so one question gets one answer.

A leaf: plain Python (no numpy, nothing of stepscope), cheap to import in the user's process, where the meter asks
whether the steps have settled.

Definitions:
- spread: half the range of the middle 80% of the values over their median ((p90 - p10) / 2 / median). Robust to
  the odd stalled step, and the same for a 1 ms and a 1 s step.
- step noise: the spread, and at least MIN_NOISE (`Reference.noise`: an overhead inside it is noise).
- mean noise: the relative standard error of a mean step: a standard deviation from the median absolute deviation
  (x 1.4826, as for normal data; one start-up step of 1.6 s among three of 1 ms does not move it, where p90 - p10
  would make it 280 times the step), over the median, over the square root of the count; at least MIN_NOISE. None
  under MIN_STEPS values.
- beyond noise: two figures differ when the log of their ratio is beyond Z times their noises combined (noise
  multiplies: a 2x step is as far from 1x as 0.5x is).
- warming: the earlier steps' median over the later steps' median - 1, when beyond WARMING and the later steps'
  own spread (from their median absolute deviation: a stalled step among five would widen p90 - p10 past a real
  settling). Medians, not means: one step that overshot (a 4 ms sleep that woke 1.6 ms late on a busy machine)
  moves a mean of three by 13%; a settling moves most steps, so it moves their median too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MIN_STEPS = 3  # per-step figures a mean's noise needs: fewer, and none can be said
MIN_NOISE = 0.02  # noise is never taken as under 2%: a few steps can agree by chance
Z = 2.0  # about 95%: two standard errors of the log ratio
WARMING = 0.03  # the MLP workload's steps 4-11 ran 3.7-4% above its steps 12-19, still 3% above the plain steady step
SD_PER_MAD = 1.4826  # standard deviations of normal data per median absolute deviation
SPREAD_PER_SD = 1.2816  # (p90 - p10) / 2 of normal data, in standard deviations


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile with linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    at = (len(ordered) - 1) * q
    lo = math.floor(at)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (at - lo)


def median(values: Sequence[float]) -> float:
    return quantile(values, 0.5)


def spread(values: Sequence[float]) -> float:
    """How far one step strays: (p90 - p10) / 2 over the median; 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mid = median(values)
    return (quantile(values, 0.9) - quantile(values, 0.1)) / 2 / mid if mid > 0 else 0.0


def robust_spread(values: Sequence[float]) -> float:
    """`spread` as normal data would give it ((p90 - p10) / 2 is 1.2816 standard deviations), from the median
    absolute deviation (1.4826 of it is one standard deviation): one stalled step among five does not move it."""
    if len(values) < 2:
        return 0.0
    mid = median(values)
    return SPREAD_PER_SD * robust_sd(values) / mid if mid > 0 else 0.0


def robust_sd(values: Sequence[float]) -> float:
    """A standard deviation from the median absolute deviation: as normal data would give it, and one outlier among
    a few values does not move it."""
    mid = median(values)
    return SD_PER_MAD * median([abs(v - mid) for v in values])


def step_noise(values: Sequence[float]) -> float:
    """The relative spread of one step, at least MIN_NOISE: a step inside it is a normal step."""
    return max(spread(values), MIN_NOISE)


def mean_noise(values: Sequence[float]) -> float | None:
    """The relative standard error of the values' mean, at least MIN_NOISE; None under MIN_STEPS values."""
    if len(values) < MIN_STEPS:
        return None
    mid = median(values)
    if mid <= 0:
        return None
    return max(robust_sd(values) / mid / math.sqrt(len(values)), MIN_NOISE)


def combined(*noises: float) -> float:
    """The noise of a ratio of figures with these relative noises."""
    return math.hypot(*noises)


def beyond_noise(before: float, after: float, noise: float, z: float = Z) -> bool:
    """Whether `after` differs from `before` beyond `noise` (the ratio's relative noise: `combined` of the two)."""
    if before <= 0 or after <= 0:
        return before != after
    return abs(math.log(after / before)) > z * noise


def change_limit(before: float, after: float, noise: float, z: float = Z) -> float:
    """The largest change noise can make between the two, in their unit: the larger under e^(z x noise)."""
    return max(abs(before), abs(after)) * (1 - math.exp(-z * noise))


def verdict(before: float, after: float, noise: float | None, *, lower_is_faster: bool = True) -> str:
    """faster | slower | within_noise | inconclusive (no noise to judge by) for two step times (or, with
    `lower_is_faster=False`, two throughputs)."""
    if noise is None or before <= 0 or after <= 0:
        return "inconclusive"
    if not beyond_noise(before, after, noise):
        return "within_noise"
    return "faster" if (after < before) == lower_is_faster else "slower"


def warming(earlier: Sequence[float], later: Sequence[float], tolerance: float = WARMING) -> float | None:
    """median(earlier) / median(later) - 1 when the steps still got faster beyond `tolerance` and the later steps'
    own spread (robust_spread: one stall among the later steps must not hide a settling); else None."""
    if not earlier or not later:
        return None
    first, second = median(earlier), median(later)
    if second <= 0:
        return None
    change = first / second - 1
    return round(change, 4) if change > max(tolerance, robust_spread(later)) else None
