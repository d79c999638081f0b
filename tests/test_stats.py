"""The one statistics model (stepscope/stats.py), against values computed by hand and numpy's own quantiles."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stepscope import stats


def test_quantile_matches_numpys_linear_interpolation() -> None:
    values = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0]
    for q in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0):
        assert stats.quantile(values, q) == pytest.approx(float(np.percentile(values, q * 100)))


def test_spread_is_half_the_middle_80_percent_over_the_median() -> None:
    # 1..11: p10 = 2, p90 = 10, median 6 -> (10 - 2) / 2 / 6
    assert stats.spread([float(v) for v in range(1, 12)]) == pytest.approx(4 / 6)
    assert stats.spread([5.0]) == 0.0
    # one stalled step among ten does not move the spread of the other nine much: its p90 lands between them
    steady = [100.0] * 9 + [1000.0]
    assert stats.spread(steady) == pytest.approx((190 - 100) / 2 / 100)


def test_step_noise_has_a_floor() -> None:
    assert stats.step_noise([100.0, 100.0, 100.0]) == stats.MIN_NOISE
    assert stats.step_noise([90.0, 100.0, 110.0]) == pytest.approx((108 - 92) / 2 / 100)


def test_mean_noise_is_a_standard_error_over_the_median() -> None:
    values = [float(v) for v in range(90, 111)]  # 21 steps, median 100, median absolute deviation 5
    assert stats.mean_noise(values) == pytest.approx(max(1.4826 * 5 / 100 / math.sqrt(21), 0.02))
    wide = [50.0, 100.0, 150.0, 100.0]  # median 100, deviations 50, 0, 50, 0: MAD 25 -> sd 37.1, over 100, over 2
    assert stats.mean_noise(wide) == pytest.approx(1.4826 * 25 / 100 / 2)
    assert stats.mean_noise([1.0, 2.0]) is None  # under MIN_STEPS
    # The LSP's short runs: a start-up step of 1.6 s beside two of ~1 ms (seen): MAD 377 µs, not p90 - p10's 1.3 s
    startup = [1608100.815, 1029.939, 652.121]
    assert stats.mean_noise(startup) == pytest.approx(1.4826 * (1029.939 - 652.121) / 1029.939 / math.sqrt(3))


def test_beyond_noise_is_symmetric_in_the_log() -> None:
    noise = 0.05  # Z x noise = 0.1: ratios beyond e^0.1 (10.5%) are real
    assert stats.beyond_noise(100, 112, noise) and stats.beyond_noise(112, 100, noise)
    assert not stats.beyond_noise(100, 109, noise) and not stats.beyond_noise(109, 100, noise)
    assert stats.change_limit(100, 109, noise) == pytest.approx(109 * (1 - math.exp(-0.1)))


def test_a_doubled_step_is_beyond_the_noise_of_its_own_steps() -> None:
    before = [1000.0 + 10 * (i % 5) for i in range(20)]
    after = [2 * v for v in before]
    noise = stats.combined(stats.mean_noise(before), stats.mean_noise(after))
    assert stats.verdict(stats.median(before), stats.median(after), noise) == "slower"
    assert stats.verdict(stats.median(after), stats.median(before), noise) == "faster"
    assert stats.verdict(1000.0, 1010.0, noise) == "within_noise"
    assert stats.verdict(1000.0, 1500.0, None) == "inconclusive"


def test_warming_takes_medians_and_the_later_spread() -> None:
    later = [10.0, 10.0, 10.0, 10.0]
    assert stats.warming([10.5, 10.5, 10.5], later) == pytest.approx(0.05)
    assert stats.warming([10.2, 10.2, 10.2], later) is None  # 2% is under WARMING (3%)
    # one overshot step among three moves the mean 13% but not the median
    assert stats.warming([10.0, 14.0, 10.0], later) is None
    # the later steps' own spread raises the bar: 5% is within steps that stray +-10%
    noisy = [9.0, 10.0, 11.0, 9.0, 10.0, 11.0, 10.0]
    assert stats.warming([10.5] * 3, noisy) is None
    # one stall among the later five (a busy machine: a 4 ms sleep woke at 30 ms) widens p90 - p10 to a spread of
    # 1.95, past the real settling from a median of 12.3 to 4 ms; their median absolute deviation is 0, so it shows
    stalled = [4.0, 4.0, 30.0, 4.0, 4.0]
    assert stats.spread(stalled) > 1.5
    assert stats.warming([19.2, 15.4, 12.3, 9.8, 7.9], stalled) == pytest.approx(12.3 / 4 - 1)
