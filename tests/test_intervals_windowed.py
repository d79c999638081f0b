"""Large interval sets are combined a window of time at a time (trace/intervals._by_window): the result must be the
one the whole-set sweep gives, wherever the windows cut, including through intervals and at touching ends."""

from __future__ import annotations

import numpy as np
import pytest

from stepscope.trace import intervals as iv


def _random_set(rng: np.random.Generator, n: int, spread: int) -> iv.Intervals:
    starts = rng.integers(0, spread, n)
    return iv.union(starts, starts + rng.integers(0, spread // max(n, 1) * 3 + 2, n))


def _covered(a: iv.Intervals, span: int) -> np.ndarray:
    """The set as a boolean per ns: the definition the operations are checked against."""
    out = np.zeros(span, dtype=bool)
    for s, e in zip(a.starts.tolist(), a.ends.tolist(), strict=True):
        out[s:e] = True
    return out


@pytest.mark.parametrize("window", [1, 2, 3, 7, 1 << 17])
def test_windowed_operations_equal_the_definition(monkeypatch: pytest.MonkeyPatch, window: int) -> None:
    monkeypatch.setattr(iv, "WINDOW", window)
    rng = np.random.default_rng(window)
    for _ in range(60):
        span = 400
        a, b = _random_set(rng, int(rng.integers(0, 40)), 300), _random_set(rng, int(rng.integers(0, 40)), 300)
        ca, cb = _covered(a, span), _covered(b, span)
        for got, want in ((iv.subtract(a, b), ca & ~cb), (iv.intersect(a, b), ca & cb), (iv.merge(a, b), ca | cb)):
            assert np.array_equal(_covered(got, span), want)
            # canonical: sorted, disjoint, non-empty, and nothing touching that one interval would hold
            assert (got.ends > got.starts).all() and (got.starts[1:] > got.ends[:-1]).all()


def test_an_interval_cut_by_several_windows_comes_back_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(iv, "WINDOW", 1)
    long = iv.Intervals(np.array([0], np.int64), np.array([100], np.int64))
    holes = iv.Intervals(np.array([10, 20, 30, 40], np.int64), np.array([11, 21, 31, 41], np.int64))
    merged = iv.merge(long, holes)
    assert merged.starts.tolist() == [0] and merged.ends.tolist() == [100]
    got = iv.subtract(long, holes)
    assert got.starts.tolist() == [0, 11, 21, 31, 41] and got.ends.tolist() == [10, 20, 30, 40, 100]
