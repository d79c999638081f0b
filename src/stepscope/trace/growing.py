"""A numpy column that grows as batches of a trace are read: one buffer per column, doubled when full.

Many small arrays joined at the end cost twice the column at that moment, and the allocator keeps the freed
small ones: a reader's peak was then twice its columns. A doubled buffer is fresh memory from the system
(large arrays are mapped, and given back when freed), and the part not yet written is never touched, so it
costs no resident memory.

A large buffer is mapped by the column itself (an anonymous mmap, unmapped when the last view of it goes), not
left to malloc: glibc's malloc raises its mmap threshold to each large block freed (up to 32 MB), so the
columns' early buffers came from the heap, and the holes they left there when they grew stayed resident under
the later ones: reading the 1 GB trace ended at 544 MB resident, 152 MB of it free heap (malloc_trim's), and
peaked at 556 MB; with the buffers mapped, 491 MB.
"""

from __future__ import annotations

import mmap

import numpy as np

FIRST_CAPACITY = 4096
MAPPED_BYTES = 1 << 20  # buffers this large or larger are mapped


def mapped_empty(n: int, dtype: np.dtype | type) -> np.ndarray:
    """An uninitialised array of n values, mapped from the system when large (see above): also for a large array
    kept as long as the trace (a per-row index), whose place in the heap would pin the temporaries' holes there."""
    dtype = np.dtype(dtype)
    nbytes = n * dtype.itemsize
    if nbytes < MAPPED_BYTES:
        return np.empty(n, dtype=dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype)  # writable; unmapped with its last view


class GrowingColumn:
    def __init__(self, dtype: np.dtype) -> None:
        self._buffer = np.empty(FIRST_CAPACITY, dtype=np.dtype(dtype))
        self._size = 0

    def extend(self, values: np.ndarray) -> None:
        end = self._size + len(values)
        if end > len(self._buffer):
            grown = mapped_empty(max(end, 2 * len(self._buffer)), self._buffer.dtype)
            grown[: self._size] = self._buffer[: self._size]
            self._buffer = grown
        self._buffer[self._size : end] = values
        self._size = end

    def take(self) -> np.ndarray:
        """The column (a view of the buffer); the builder lets go of it."""
        column = self._buffer[: self._size]
        self._buffer = np.empty(0, dtype=column.dtype)
        self._size = 0
        return column
