"""trace.model.start_order against np.lexsort((-dur, start)), the order it stands for, and argsort(kind='stable')
against lexsort with the row number as the last key."""

from __future__ import annotations

import numpy as np

from stepscope.trace.model import start_order


def test_planted_ties() -> None:
    # rows 1 and 3 start together (3 is longer: first), rows 0 and 2 too with equal lengths (as given: 0 then 2)
    start = np.array([5, 1, 5, 1, 0], dtype=np.int64)
    dur = np.array([2, 1, 2, 9, 4], dtype=np.int64)
    assert start_order(start, dur).tolist() == [4, 3, 1, 0, 2]


def test_random_tables_match_lexsort() -> None:
    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 17, 1000):
        for spread in (3, 50, 10**9):
            start = rng.integers(0, spread, n).astype(np.int64)
            dur = rng.integers(0, 4, n).astype(np.int64)
            assert start_order(start, dur).tolist() == np.lexsort((-dur, start)).tolist()
    nearly = np.sort(rng.integers(0, 10**6, 5000)) + rng.integers(0, 30, 5000)  # a replay's shifted starts
    dur = rng.integers(0, 100, 5000)
    assert start_order(nearly, dur).tolist() == np.lexsort((-dur, nearly)).tolist()


def test_stable_argsort_is_lexsort_with_the_row_last() -> None:
    key = np.random.default_rng(6).integers(0, 7, 500)
    assert np.argsort(key, kind="stable").tolist() == np.lexsort((np.arange(500), key)).tolist()
