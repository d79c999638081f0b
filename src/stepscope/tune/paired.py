"""How much faster a candidate is than the rung it builds on, from runs of both interleaved in time, with a
confidence interval; and whether that is enough to keep it.

A run's figure is its throughput: samples (or steps) over wall time across windows of consecutive steps, each
window synchronised with the device at its ends. Per-step medians are the wrong statistic where a loader
delivers batches in bursts (many fast steps, then one long wait): the figure is what the job delivers over time.

The runs alternate (reference, candidate, reference, ...), so the machine's drift cancels instead of being
charged to the fix: each candidate run is compared with the reference interpolated (in log throughput, linearly
in time) between the reference runs before and after it. The gain is the geometric mean of those ratios.

Its interval is a bootstrap: each replicate resamples every run's windows (the noise within a run) and adds to
each ratio a run-to-run difference drawn from what two runs of one configuration were seen to differ by, beyond
their windows' noise (`run_noise`; a process's placement, clocks and start make runs differ more than windows
do). The replicates are drawn from a fixed seed: the same data gives the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stepscope.stats import MIN_NOISE

CONFIDENCE = 0.95
RESAMPLES = 4000
MIN_RUN_NOISE = MIN_NOISE  # two runs of one program differ by at least this much (relative, per run)
REFERENCE, CANDIDATE = "reference", "candidate"


@dataclass(frozen=True)
class Window:
    samples: float  # samples in the window (steps, when the batch size is unknown)
    seconds: float  # its wall time, device synchronised at both ends


@dataclass(frozen=True)
class RunSeries:
    arm: str  # REFERENCE | CANDIDATE
    at: float  # when it ran (any clock, the same for all runs compared)
    windows: tuple[Window, ...]

    @property
    def rate(self) -> float:
        return throughput(self.windows)


@dataclass(frozen=True)
class Gain:
    ratio: float  # candidate throughput / reference throughput (geometric mean over the candidate's runs)
    low: float
    high: float
    windows: int  # the candidate's windows
    runs: int  # the candidate's runs
    confidence: float = CONFIDENCE
    each: tuple[float, ...] = ()  # each candidate run's own ratio
    # The two sides of `ratio` (in the windows' unit): the candidate's runs' throughput and the reference's
    # interpolated to each of them, geometric means over the candidate's runs; rate / reference_rate == ratio.
    rate: float = 0.0
    reference_rate: float = 0.0

    def text(self) -> str:
        """'1.72x (1.55-1.90, 6 windows)'."""
        return f"{self.ratio:.2f}x ({self.low:.2f}-{self.high:.2f}, {self.windows} windows)"


def throughput(windows: Sequence[Window]) -> float:
    seconds = sum(w.seconds for w in windows)
    return sum(w.samples for w in windows) / seconds if seconds > 0 else 0.0


def _usable(runs: Sequence[RunSeries]) -> list[RunSeries]:
    return [r for r in runs if r.windows and r.rate > 0]


def _brackets(runs: list[RunSeries]) -> list[tuple[int, list[tuple[int, float]]]]:
    """Each candidate run (by index) with the reference runs it is compared with and their weights: the nearest
    before and after it, interpolated linearly in time; one side alone when the other has none."""
    refs = [i for i, r in enumerate(runs) if r.arm == REFERENCE]
    pairs = []
    for j, run in enumerate(runs):
        if run.arm != CANDIDATE:
            continue
        before = [i for i in refs if runs[i].at <= run.at]
        after = [i for i in refs if runs[i].at > run.at]
        a = max(before, key=lambda i: runs[i].at) if before else None
        b = min(after, key=lambda i: runs[i].at) if after else None
        if a is not None and b is not None:
            span = runs[b].at - runs[a].at
            w = (run.at - runs[a].at) / span if span > 0 else 0.5
            pairs.append((j, [(a, 1 - w), (b, w)]))
        elif a is not None or b is not None:
            pairs.append((j, [(a if a is not None else b, 1.0)]))  # type: ignore[list-item]
    return pairs


def _sides(runs: Sequence[RunSeries]) -> list[tuple[float, float]]:
    """Each candidate run's log throughput and the reference's interpolated around it, in the order they ran."""
    usable = _usable(runs)
    return [(math.log(usable[j].rate), sum(w * math.log(usable[i].rate) for i, w in refs))
            for j, refs in _brackets(usable)]


def ratios(runs: Sequence[RunSeries]) -> list[float]:
    """Each candidate run's throughput over the reference interpolated around it, in the order they ran."""
    return [math.exp(c - r) for c, r in _sides(runs)]


def paired_rates(runs: Sequence[RunSeries]) -> tuple[float, float] | None:
    """The candidate's throughput and the reference's at the same times: geometric means over the candidate's runs
    of each run's rate and of the reference interpolated around it (None without a candidate and a reference)."""
    sides = _sides(runs)
    if not sides:
        return None
    return (math.exp(sum(c for c, _ in sides) / len(sides)), math.exp(sum(r for _, r in sides) / len(sides)))


def estimate(runs: Sequence[RunSeries]) -> float | None:
    """The gain's point estimate: the geometric mean of the candidate runs' ratios, which is the candidate's paired
    rate over the reference's (None without a candidate and a reference run)."""
    rates = paired_rates(runs)
    return rates[0] / rates[1] if rates else None


def gain(runs: Sequence[RunSeries], run_noise: float = MIN_RUN_NOISE, *, confidence: float = CONFIDENCE,
         resamples: int = RESAMPLES, seed: int = 0) -> Gain | None:
    """The gain with its bootstrap interval (None without a candidate and a reference run)."""
    usable = _usable(runs)
    pairs = _brackets(usable)
    sides = paired_rates(usable)
    if sides is None:
        return None
    rng = np.random.default_rng(seed)
    log_rates = [np.log(_resampled_rates(r.windows, resamples, rng)) for r in usable]
    diffs = np.zeros((len(pairs), resamples))
    for k, (j, refs) in enumerate(pairs):
        reference = sum(w * log_rates[i] for i, w in refs)
        # A run's own difference from its configuration's mean: the candidate's, and the weighted references'.
        sd = run_noise * math.sqrt(1 + sum(w * w for _, w in refs))
        diffs[k] = log_rates[j] - reference + rng.normal(0.0, sd, resamples)
    replicates = np.exp(diffs.mean(axis=0))
    tail = (1 - confidence) / 2
    low, high = np.quantile(replicates, [tail, 1 - tail])
    candidate = [usable[j] for j, _ in pairs]
    return Gain(ratio=sides[0] / sides[1], low=float(low), high=float(high),
                windows=sum(len(r.windows) for r in candidate), runs=len(candidate), confidence=confidence,
                each=tuple(ratios(usable)), rate=sides[0], reference_rate=sides[1])


def _resampled_rates(windows: Sequence[Window], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """The run's throughput over its windows drawn with replacement, `resamples` times. Resampling n windows
    spreads the mean by (n - 1) / n of its true variance: the spread is widened back by sqrt(n / (n - 1))."""
    n = len(windows)
    samples = np.array([w.samples for w in windows], dtype=float)
    seconds = np.array([w.seconds for w in windows], dtype=float)
    idx = rng.integers(0, n, size=(resamples, n))
    drawn = samples[idx].sum(axis=1) / seconds[idx].sum(axis=1)
    if n < 2:
        return drawn
    rate = samples.sum() / seconds.sum()
    return rate * np.exp(math.sqrt(n / (n - 1)) * np.log(drawn / rate))


def run_noise(pairs: Sequence[tuple[RunSeries, RunSeries]], floor: float = MIN_RUN_NOISE) -> float:
    """How much one run of a configuration differs from the configuration's mean, beyond its windows' noise (a
    relative standard deviation), from pairs of runs of one configuration: half the squared log difference of
    each pair, less the windows' share of it, averaged over the pairs; at least `floor`. The pairs' own drift
    counts as noise here, which errs wide."""
    estimates = []
    for a, b in pairs:
        if a.windows and b.windows and a.rate > 0 and b.rate > 0:
            between = (math.log(a.rate) - math.log(b.rate)) ** 2 / 2
            within = (_window_variance(a) + _window_variance(b)) / 2
            estimates.append(max(between - within, 0.0))
    if not estimates:
        return floor
    return max(math.sqrt(sum(estimates) / len(estimates)), floor)


def _window_variance(run: RunSeries) -> float:
    """The variance of the run's log throughput due to its windows (of their log rates, over their count)."""
    n = len(run.windows)
    if n < 2:
        return 0.0
    logs = [math.log(w.samples / w.seconds) for w in run.windows if w.seconds > 0 and w.samples > 0]
    mean = sum(logs) / len(logs)
    return sum((x - mean) ** 2 for x in logs) / (len(logs) - 1) / n


KEEP, DROP, UNDECIDED = "keep", "drop", "undecided"
MIN_RUNS = 2  # candidate runs a decision needs: one run's luck (a neighbour's job pausing) is not a gain


def decide(g: Gain, min_gain: float, min_runs: int = MIN_RUNS) -> str:
    """Keep when the interval's lower end clears 1 + min_gain and every candidate run beat the reference around
    it; drop when the interval's upper end is below 1 + min_gain; both only from `min_runs` candidate runs on.
    Else measure again.

    A machine shared with other work makes a run's speed jump now and then, more often than two runs a run apart
    show: one candidate run that happened to run while the neighbours were quiet looks like a 2x gain with an
    interval to match (seen on this project's shared 2-core machine: channels_last "2.22x (1.41-3.49)" in one
    tune, 0.58x-1.11x in four others). A second run, and a win in each, is what tells a gain from luck."""
    bar = 1 + min_gain
    if g.runs < min_runs:
        return UNDECIDED
    if g.low > bar and all(r > 1 for r in g.each):
        return KEEP
    if g.high < bar:
        return DROP
    return UNDECIDED
