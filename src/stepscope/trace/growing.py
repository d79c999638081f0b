"""A numpy column that grows as batches of a trace are read: one buffer per column, doubled when full.

Many small arrays joined at the end cost twice the column at that moment, and the allocator keeps the freed
small ones: a reader's peak was then twice its columns. A doubled buffer is fresh memory from the system
(large arrays are mapped, and given back when freed), and the part not yet written is never touched, so it
costs no resident memory.
"""

from __future__ import annotations

import numpy as np

FIRST_CAPACITY = 4096


class GrowingColumn:
    def __init__(self, dtype: np.dtype) -> None:
        self._buffer = np.empty(FIRST_CAPACITY, dtype=dtype)
        self._size = 0

    def extend(self, values: np.ndarray) -> None:
        end = self._size + len(values)
        if end > len(self._buffer):
            grown = np.empty(max(end, 2 * len(self._buffer)), dtype=self._buffer.dtype)
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
