"""The batch size of whatever a DataLoader yields (the first dimension of its first tensor), and its bytes (what a
batch made in a worker carries across to the main process)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_DEPTH = 4  # batches nest a little (dict of tuples); deeper is not a batch


def batch_size_of(batch: Any, depth: int = 0) -> int | None:
    """First dimension of the first tensor (or array) found walking tuples, lists and mappings in order."""
    shape = getattr(batch, "shape", None)
    if shape is not None and not isinstance(batch, type):
        try:
            return int(shape[0]) if len(shape) >= 1 else None
        except (TypeError, ValueError, IndexError):
            return None
    if depth >= MAX_DEPTH or isinstance(batch, (str, bytes)):
        return None
    if isinstance(batch, Mapping):
        items = batch.values()
    elif isinstance(batch, (tuple, list)):
        items = batch
    else:
        return None
    for item in items:
        size = batch_size_of(item, depth + 1)
        if size is not None:
            return size
    return None


def batch_bytes_of(batch: Any, depth: int = 0) -> int:
    """The bytes of every tensor (or array) in the batch, walking tuples, lists and mappings (0: none found)."""
    nbytes = getattr(batch, "nbytes", None)
    if isinstance(nbytes, int) and getattr(batch, "shape", None) is not None:
        return nbytes
    if depth >= MAX_DEPTH or isinstance(batch, (str, bytes)):
        return 0
    items = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (tuple, list)) else ()
    return sum(batch_bytes_of(item, depth + 1) for item in items)


# Where a batch size came from, strongest first: the user's word, what the loader yields, the model's input.
BATCH_SIZE_SOURCES = ("user", "trainer", "dataloader", "model input")


def stronger_batch_size(current: tuple[int | None, str | None], size: int | None,
                        source: str) -> tuple[int | None, str | None]:
    """(batch size, its source) after `size` from `source` is seen: it replaces one from a weaker source."""
    rank = BATCH_SIZE_SOURCES.index
    if not size or (current[1] is not None and rank(source) >= rank(current[1])):
        return current
    return int(size), source
