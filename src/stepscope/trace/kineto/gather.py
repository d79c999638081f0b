"""Fields of a batch of decoded events as numpy columns in one C pass (`_gather.c`), where it was built; a field it
cannot take exactly (a value that is not a plain int or float, or no C at all) comes back as None, and the reader
builds that column its Python way (`np.fromiter` over the field), which gives the same values."""

from __future__ import annotations

import numpy as np

try:
    import stepscope.trace.kineto._gather as _gather  # type: ignore[import-not-found]
except ImportError:  # not built (no compiler, not Linux): the Python road
    _gather = None
_fill = _gather.fill if _gather is not None else None
_objects = _gather.objects if _gather is not None else None
_codes = _gather.codes if _gather is not None else None

INT, FLOAT = "q", "d"  # an int64 column, a float64 column
_DTYPES = {INT: np.int64, FLOAT: np.float64}


def gathered(items: list, fields: tuple[tuple[str, str], ...]) -> list[np.ndarray | None]:
    """Each (field, INT or FLOAT)'s column over `items` (structs of one type), or None where it was not taken."""
    if _fill is None or not items:
        return [None] * len(fields)
    outs = tuple(np.empty(len(items), dtype=_DTYPES[kind]) for _, kind in fields)
    taken = _fill(items, tuple(name for name, _ in fields), outs, "".join(kind for _, kind in fields).encode())
    return [out if ok else None for out, ok in zip(outs, taken, strict=True)]


def field_values(items: list, name: str, none_as: object = None) -> list:
    """`[item.<name> for item in items]` (a None as `none_as`, when that is not None), in C where it can be."""
    got = _objects(items, name, none_as) if _objects is not None and items else None
    if got is not None:
        return got
    values = [getattr(item, name) for item in items]
    return values if none_as is None else [none_as if v is None else v for v in values]


def type_codes(items: list, code_of: dict[type, int]) -> np.ndarray:
    """`code_of[type(item)]` of each item, as int8."""
    out = np.empty(len(items), dtype=np.int8)
    if _codes is not None and _codes(items, code_of, out):
        return out
    return np.fromiter(map(code_of.__getitem__, map(type, items)), dtype=np.int8, count=len(items))
