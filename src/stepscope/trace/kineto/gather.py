"""Fields of a batch of decoded events as numpy columns in one C pass (`_gather.c`), where it was built; a field it
cannot take exactly (a value that is not a plain int or float, or no C at all) comes back as None, and the reader
builds that column its Python way (`np.fromiter` over the field), which gives the same values."""

from __future__ import annotations

import numpy as np

try:
    from stepscope.trace.kineto._gather import fill as _fill  # type: ignore[import-not-found]
except ImportError:  # not built (no compiler, not Linux): the Python road
    _fill = None

INT, FLOAT = "q", "d"  # an int64 column, a float64 column
_DTYPES = {INT: np.int64, FLOAT: np.float64}


def gathered(items: list, fields: tuple[tuple[str, str], ...]) -> list[np.ndarray | None]:
    """Each (field, INT or FLOAT)'s column over `items` (structs of one type), or None where it was not taken."""
    if _fill is None or not items:
        return [None] * len(fields)
    outs = tuple(np.empty(len(items), dtype=_DTYPES[kind]) for _, kind in fields)
    taken = _fill(items, tuple(name for name, _ in fields), outs, "".join(kind for _, kind in fields).encode())
    return [out if ok else None for out, ok in zip(outs, taken, strict=True)]
