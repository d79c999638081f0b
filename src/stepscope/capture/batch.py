"""The batch size of whatever a DataLoader yields: the first dimension of its first tensor."""

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
