"""replay.whatif._contains_any (which host ranges hold a launch or a sync) against the definition, row by row."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from stepscope.replay.whatif import _contains_any


def _events(start: list[int], dur: list[int], tid: list[int]) -> SimpleNamespace:
    s, d = np.array(start, dtype=np.int64), np.array(dur, dtype=np.int64)
    return SimpleNamespace(events=SimpleNamespace(start=s, end=s + d, tid=np.array(tid, dtype=np.int64)))


def _by_definition(trace: SimpleNamespace, rows: np.ndarray, inner: np.ndarray) -> np.ndarray:
    ev = trace.events
    return np.array([any(ev.tid[j] == ev.tid[i] and ev.start[i] <= ev.start[j] and ev.end[j] <= ev.end[i]
                         for j in inner) for i in rows], dtype=bool)


def test_planted_cases() -> None:
    # 0: [0, 100) thread 1 holds 3; 1: [200, 300) thread 1 holds nothing (4 is on thread 2); 2: [400, 450) thread 1
    # where 5 starts inside but ends after it; 3: [10, 20) thread 1 holds 3 exactly; 4 [220, 230) thread 2; 5 [440, 460)
    trace = _events([0, 200, 400, 10, 220, 440], [100, 100, 50, 10, 10, 20], [1, 1, 1, 1, 2, 1])
    got = _contains_any(trace, np.array([0, 1, 2]), np.array([3, 4, 5]))
    assert got.tolist() == [True, False, False]


def test_random_traces_match_the_definition() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        trace = _events(rng.integers(0, 200, n).tolist(), rng.integers(0, 60, n).tolist(),
                        rng.integers(0, 3, n).tolist())
        rows = rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False)
        inner = rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False)
        assert _contains_any(trace, rows, inner).tolist() == _by_definition(trace, rows, inner).tolist()
