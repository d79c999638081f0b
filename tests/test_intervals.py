import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stepscope.trace import intervals as iv


def _set(pairs: list[tuple[int, int]]) -> set[int]:
    return {t for s, e in pairs for t in range(s, e)}


def _as_set(a: iv.Intervals) -> set[int]:
    return _set(list(zip(a.starts.tolist(), a.ends.tolist(), strict=True)))


spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 15)).map(lambda p: (p[0], p[0] + p[1])), max_size=12)


def _build(pairs: list[tuple[int, int]]) -> iv.Intervals:
    return iv.union(np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64))


@settings(max_examples=200, deadline=None)
@given(spans, spans)
def test_algebra_matches_sets(a_pairs: list[tuple[int, int]], b_pairs: list[tuple[int, int]]) -> None:
    a, b = _build(a_pairs), _build(b_pairs)
    assert _as_set(a) == _set(a_pairs)
    assert np.all(a.starts[1:] > a.ends[:-1]), "disjoint, sorted and not touching"
    assert _as_set(iv.intersect(a, b)) == _set(a_pairs) & _set(b_pairs)
    assert _as_set(iv.subtract(a, b)) == _set(a_pairs) - _set(b_pairs)
    lo, hi = np.array([0, 10, 30]), np.array([80, 20, 31])
    expected = [len(_set(a_pairs) & set(range(int(x), int(y)))) for x, y in zip(lo, hi, strict=True)]
    assert iv.coverage(a, lo, hi).tolist() == expected
    assert _as_set(iv.complement(a, 5, 50)) == set(range(5, 50)) - _set(a_pairs)


def test_empty_inputs() -> None:
    assert len(iv.union(np.array([3]), np.array([3]))) == 0
    assert iv.coverage(iv.EMPTY, np.array([0]), np.array([10])).tolist() == [0]
    assert iv.subtract(iv.EMPTY, _build([(0, 5)])).total == 0
