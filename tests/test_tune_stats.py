"""tune's statistics on window series with a planted truth: throughput over windows, the interleaved gain and its
interval, and the decision. The series are made here by stated mechanisms (a loader that delivers in bursts, a
machine that slows down run after run, a real 1.7x gain, a null change), so each expected value has a reason of
its own; the old per-step statistics are run on the same data where they went wrong."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from stepscope.tune.paired import (
    CANDIDATE,
    DROP,
    KEEP,
    REFERENCE,
    UNDECIDED,
    Gain,
    RunSeries,
    Window,
    decide,
    estimate,
    gain,
    run_noise,
    throughput,
)

BATCH = 32


def windows_of(step_ms: list[float], per_window: int) -> tuple[Window, ...]:
    """Consecutive steps of BATCH samples grouped into windows (what the step clock records)."""
    out = []
    for i in range(0, len(step_ms) - per_window + 1, per_window):
        chunk = step_ms[i:i + per_window]
        out.append(Window(samples=BATCH * len(chunk), seconds=sum(chunk) / 1e3))
    return tuple(out)


def run(arm: str, at: float, rate: float, n: int = 3, noise: float = 0.0, rng: np.random.Generator | None = None,
        seconds: float = 1.0) -> RunSeries:
    """A run of n windows of `seconds` each at `rate` samples/s, each window's rate off by a lognormal `noise`."""
    rng = rng or np.random.default_rng(0)
    return RunSeries(arm, at, tuple(Window(samples=rate * seconds * math.exp(rng.normal(0, noise)) if noise else
                                           rate * seconds, seconds=seconds) for _ in range(n)))


def test_throughput_is_samples_over_wall_time_by_hand() -> None:
    # 32 samples in 0.5 s and 32 in 0.25 s: 64 / 0.75 = 85.33 samples/s (not the mean of 64 and 128 per second).
    assert throughput([Window(32, 0.5), Window(32, 0.25)]) == pytest.approx(64 / 0.75)
    assert throughput([]) == 0.0


def test_the_candidate_is_compared_with_the_reference_interpolated_between_the_runs_around_it() -> None:
    # Reference at t=0 (100/s) and t=2 (80/s), candidate at t=1 (150/s): the reference there is
    # exp((ln 100 + ln 80) / 2) = sqrt(8000) = 89.44/s, so the gain is 150 / 89.44 = 1.677.
    runs = [run(REFERENCE, 0, 100), run(CANDIDATE, 1, 150), run(REFERENCE, 2, 80)]
    assert estimate(runs) == pytest.approx(150 / math.sqrt(8000))
    # A quarter of the way from the first to the second: weights 3/4 and 1/4.
    runs = [run(REFERENCE, 0, 100), run(CANDIDATE, 1, 150), run(REFERENCE, 4, 80)]
    assert estimate(runs) == pytest.approx(150 / math.exp(0.75 * math.log(100) + 0.25 * math.log(80)))
    # A candidate with a reference on one side only is compared with that one.
    assert estimate([run(CANDIDATE, 0, 120), run(REFERENCE, 1, 100)]) == pytest.approx(1.2)
    assert estimate([run(REFERENCE, 0, 100)]) is None and gain([run(CANDIDATE, 0, 1)]) is None


def test_a_bursty_loader_is_measured_by_its_windows_where_step_statistics_fail() -> None:
    """Two workers deliver their batches together: a step that finds a batch ready (4 ms), then one that waits for
    the next pair. Reference: 4 and 76 ms; the candidate (a cheaper transform) 4 and 60 ms: 80 / 64 = 1.25x the
    throughput, exactly."""
    rng = np.random.default_rng(1)

    def steps(wait: float, n: int) -> list[float]:
        return [(wait if i % 2 else 4.0) * math.exp(rng.normal(0, 0.03)) for i in range(n)]

    ref_a, cand, ref_b, cand_b, ref_c = steps(76, 40), steps(60, 40), steps(76, 40), steps(60, 40), steps(76, 40)
    runs = [RunSeries(REFERENCE, 0, windows_of(ref_a, 10)), RunSeries(CANDIDATE, 1, windows_of(cand, 10)),
            RunSeries(REFERENCE, 2, windows_of(ref_b, 10)), RunSeries(CANDIDATE, 3, windows_of(cand_b, 10)),
            RunSeries(REFERENCE, 4, windows_of(ref_c, 10))]
    g = gain(runs, run_noise=0.02)
    assert g is not None and g.ratio == pytest.approx(1.25, rel=0.02)
    assert g.low > 1.15 and g.high < 1.36 and decide(g, 0.05) == KEEP
    # The per-step view the tune used before, on its 20 timed steps: the median of a step that is either 4 or
    # 60-76 ms long, and a noise band of twice the standard error of the medians (from the interquartile range),
    # which the bursts make wider than the gain: the real 1.25x was "within noise".
    def se(values: list[float]) -> float:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        return 1.2533 * ((q3 - q1) / 1.349) / math.sqrt(len(values)) / statistics.median(values)

    band = 2 * math.hypot(se(ref_a[:20]), se(cand[:20]))
    old_gain = statistics.median(ref_a[:20]) / statistics.median(cand[:20])
    assert band > 0.5 and old_gain < 1 + band


def test_a_drifting_machine_cancels_out_of_interleaved_runs() -> None:
    """The machine slows by 4% a run (other jobs start on it): a null change measured right after its reference
    looks 4% slower, and one measured after the reference the old way (baseline first, fix later) far worse.
    Interleaved, the drift cancels: the null change is not kept, and a real 1.3x gain is found as 1.3x."""
    def speed(t: int) -> float:
        return 1000 * (1 - 0.04 * t)

    null = [run(REFERENCE if t % 2 == 0 else CANDIDATE, t, speed(t)) for t in range(5)]  # A B A B A
    assert null[1].rate / null[0].rate == pytest.approx(0.96)  # back to back, no interpolation: 0.96x
    g = gain(null, run_noise=0.02)
    assert g is not None and g.ratio == pytest.approx(1.0, abs=0.002) and g.low < 1 < g.high
    assert decide(g, 0.05) != KEEP
    real = [run(REFERENCE if t % 2 == 0 else CANDIDATE, t, speed(t) * (1.3 if t % 2 else 1)) for t in range(5)]
    g = gain(real, run_noise=0.02)
    assert g is not None and g.ratio == pytest.approx(1.3, rel=0.003) and g.low < 1.3 < g.high
    assert decide(g, 0.05) == KEEP


def test_a_real_1_7x_gain_is_kept_with_an_interval_around_it() -> None:
    rng = np.random.default_rng(7)
    runs = [run(REFERENCE if i % 2 == 0 else CANDIDATE, i, 850 if i % 2 else 500, noise=0.05, rng=rng)
            for i in range(5)]
    g = gain(runs, run_noise=0.02)
    assert g is not None and g.low < 1.7 < g.high and g.high / g.low < 1.25
    assert g.windows == 6 and g.runs == 2 and decide(g, 0.05) == KEEP
    assert g.text() == f"{g.ratio:.2f}x ({g.low:.2f}-{g.high:.2f}, 6 windows)"
    # One candidate run alone decides nothing, however clear: a second must agree.
    first = gain(runs[:3], run_noise=0.02)
    assert first is not None and first.low > 1.5 and decide(first, 0.05) == UNDECIDED


def test_one_lucky_run_is_not_a_gain() -> None:
    """A shared machine: the neighbours paused during the first candidate run (1,000/s against ~490 around it),
    not during the second (520 against ~505). Both runs beat their references, but the two runs of the
    candidate are as far apart as the gain: the interval, with what runs of one configuration differ by here,
    does not clear the bar. And a second run that loses outright leaves nothing to keep whatever the mean."""
    a0, b0, a1, b1, a2 = (run(REFERENCE, 0, 500), run(CANDIDATE, 1, 1000), run(REFERENCE, 2, 480),
                          run(CANDIDATE, 3, 520), run(REFERENCE, 4, 510))
    noise = run_noise([(a0, a1), (a1, a2), (b0, b1)])
    assert noise == pytest.approx(math.sqrt((math.log(500 / 480) ** 2 / 2 + math.log(510 / 480) ** 2 / 2
                                             + math.log(1000 / 520) ** 2 / 2) / 3))
    g = gain([a0, b0, a1, b1, a2], noise)
    assert g is not None and g.ratio > 1.4 and all(r > 1 for r in g.each) and decide(g, 0.05) == UNDECIDED
    lost = gain([a0, b0, a1, run(CANDIDATE, 3, 450), a2], 0.02)
    assert lost is not None and lost.low > 1.05 and lost.each[1] < 1 and decide(lost, 0.05) == UNDECIDED


def test_a_null_change_is_never_kept_and_its_interval_holds_one() -> None:
    """The same configuration on both arms (5% noise per window, three rounds) over 200 seeds: the fix is never
    kept (the interval's lower end would have to clear 1.05), and the 95% interval holds the true gain, 1.0, in
    about 95% of them (200 draws: a standard deviation of 1.5%)."""
    held, kept = 0, 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        runs = [run(REFERENCE if i % 2 == 0 else CANDIDATE, i, 700, noise=0.05, rng=rng) for i in range(7)]
        g = gain(runs, seed=seed)
        assert g is not None
        held += g.low <= 1.0 <= g.high
        kept += decide(g, 0.05) == KEEP
    assert kept == 0 and 0.93 <= held / 200 <= 0.995


def test_the_interval_counts_how_much_runs_differ_beyond_their_windows() -> None:
    """Two runs of one configuration 10% apart, with identical windows inside each: runs differ by
    ln(1.1) / sqrt(2) = 6.7% each, though their windows say 0%; and that widens a gain's interval."""
    a = run(REFERENCE, 0, 100)
    b = run(REFERENCE, 2, 110)
    assert run_noise([(a, b)]) == pytest.approx(math.log(1.1) / math.sqrt(2))
    assert run_noise([]) == 0.02 and run_noise([(a, a)]) == 0.02  # at least the floor
    runs = [a, run(CANDIDATE, 1, 120), b]
    narrow, wide = gain(runs, run_noise=0.02), gain(runs, run_noise=run_noise([(a, b)]))
    assert narrow is not None and wide is not None and narrow.ratio == wide.ratio
    assert wide.high - wide.low > 2 * (narrow.high - narrow.low)
    assert gain(runs, 0.05, seed=3) == gain(runs, 0.05, seed=3)  # a fixed seed: the same interval every time


def test_decide_keeps_above_the_bar_drops_below_and_measures_again_between() -> None:
    def g(low: float, high: float, runs: int = 2) -> Gain:
        return Gain(ratio=(low + high) / 2, low=low, high=high, windows=3 * runs, runs=runs,
                    each=((low + high) / 2,) * runs)

    assert decide(g(1.06, 1.3), 0.05) == KEEP
    assert decide(g(0.8, 1.04), 0.05) == DROP
    assert decide(g(1.0, 1.2), 0.05) == UNDECIDED
    assert decide(g(1.0, 1.2), 0.0) == UNDECIDED and decide(g(1.01, 1.2), 0.0) == KEEP
    assert decide(g(1.06, 1.3, runs=1), 0.05) == UNDECIDED and decide(g(0.8, 1.04, runs=1), 0.05) == UNDECIDED
    assert decide(g(1.06, 1.3, runs=1), 0.05, min_runs=1) == KEEP  # --max-rounds 1 decides on one run
