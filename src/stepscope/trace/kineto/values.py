"""Kineto's loosely typed values (ints as floats, streams as "0x0", None) into numbers and columns."""

from __future__ import annotations

import numpy as np

from stepscope.trace.kineto.schema import Scalar
from stepscope.trace.model import NONE


def as_int(value: Scalar, default: int = NONE) -> int:
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value == value and abs(value) < 9e18 else default
    try:
        return int(value, 0)  # HIP writes streams as "0x0"
    except (ValueError, TypeError):
        return default


def as_float(value: Scalar) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (ValueError, TypeError):
        return None


def int_column(values: list[Scalar], default: int = NONE) -> np.ndarray:
    """Column of ints; None becomes `default`. Falls back to per-value parsing for odd types ("0x0").

    Going through float64 lets numpy turn None into NaN in C; ids and byte counts stay exact below 2**53.
    """
    try:
        floats = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([as_int(v, default) for v in values], dtype=np.int64)
    missing = ~(np.abs(floats) < 2.0**62)  # None (NaN), infinities and ids no int64 holds
    if missing.any():
        floats[missing] = default
    return floats.astype(np.int64)


def float_column(values: list[Scalar]) -> np.ndarray:
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([np.nan if (f := as_float(v)) is None else f for v in values], dtype=np.float64)
