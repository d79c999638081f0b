"""Two pieces of the reader that keep the 1 GB trace's peak down, checked against values counted by hand: a growing
column (its large buffers mapped by itself, not malloc's) holds exactly what was appended, and the distinct threads
of a table's rows (runs of one thread collapsed before the sort) are the pairs written."""

from __future__ import annotations

import mmap

import numpy as np

from stepscope.trace import growing
from stepscope.trace.threads import _threads


def test_a_growing_column_holds_what_was_appended_and_maps_its_large_buffers() -> None:
    column = growing.GrowingColumn(np.dtype(np.int64))
    batches = [np.arange(k * 1000, k * 1000 + 1000 + k, dtype=np.int64) for k in range(200)]  # 219,900 values
    for batch in batches:
        column.extend(batch)
    taken = column.take()
    np.testing.assert_array_equal(taken, np.concatenate(batches))
    assert taken.nbytes >= growing.MAPPED_BYTES
    base = taken
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)  # grown past MAPPED_BYTES: its own mapping
    taken[0] = -5  # writable, as the reader's in-place conversions need
    assert taken[0] == -5
    small = growing.GrowingColumn(np.dtype(np.float64))
    small.extend(np.array([1.5, 2.5]))
    assert small.take().tolist() == [1.5, 2.5]


def test_threads_are_the_distinct_pairs_runs_and_interleavings_alike() -> None:
    pid = np.array([1, 1, 1, 2, 2, 1, 1, 3, 1, 2, 2, 2], dtype=np.int64)
    tid = np.array([7, 7, 8, 7, 7, 7, 7, 9, 8, 7, 5, 5], dtype=np.int64)
    assert _threads(pid, tid) == {(1, 7), (1, 8), (2, 7), (3, 9), (2, 5)}
    assert _threads(pid[:1], tid[:1]) == {(1, 7)}
    assert _threads(pid[:0], tid[:0]) == set()
