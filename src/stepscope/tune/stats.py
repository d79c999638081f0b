"""Statistics of timed steps: the median, its spread, and the noise band a gain must clear to count.

The median step, because one slow step (a collection, a worker hiccup) would move a mean. The spread is half
the interquartile range over the median. How precisely a median is known is its standard error,
1.2533 * sigma / sqrt(n) with sigma = IQR / 1.349 (a normal approximation robust to outliers). A gain is kept when
it exceeds the noise band: twice the standard error of the ratio of two medians, at least MIN_BAND, and at
least how far the baseline itself moved between its first and last run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_BAND = 0.03  # gains under 3% are not told apart from a busy machine's drift


@dataclass(frozen=True)
class StepStats:
    median_ns: float
    spread: float  # half the interquartile range, over the median
    se: float  # relative standard error of the median
    n: int


def summarize(durations: Sequence[float]) -> StepStats | None:
    values = [float(d) for d in durations if d > 0]
    if not values:
        return None
    median = statistics.median(values)
    if len(values) < 4:
        return StepStats(median, 0.0, 0.0, len(values))
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    iqr = max(q3 - q1, 0.0)
    se = 1.2533 * (iqr / 1.349) / math.sqrt(len(values)) / median
    return StepStats(median, iqr / 2 / median, se, len(values))


def ratio_spread(a: StepStats, b: StepStats) -> float:
    """The relative standard error of a ratio of two medians (theirs added in quadrature): a speed-up's ±."""
    return math.hypot(a.se, b.se)


def noise_band(a: StepStats, b: StepStats, drift: float = 0.0) -> float:
    """The relative change two runs must show before it is more than noise."""
    return max(MIN_BAND, 2 * math.hypot(a.se, b.se), drift)


def drift(first: StepStats, last: StepStats) -> float:
    """How far two runs of the same configuration are apart, relative to their mean."""
    return abs(first.median_ns - last.median_ns) / ((first.median_ns + last.median_ns) / 2)
