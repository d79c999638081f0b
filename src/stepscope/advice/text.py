"""Numbers as the verdict and the evidence write them."""

from __future__ import annotations


def pct(share: float) -> str:
    """0.334 -> '33%'; shares under 1% keep one decimal."""
    return f"{share * 100:.1f}%" if 0 < share < 0.01 else f"{share * 100:.0f}%"


def ms(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.3g} s"
    if ns >= 1e8:
        return f"{ns / 1e6:.0f} ms"
    return f"{ns / 1e6:.3g} ms" if ns >= 1e6 else f"{ns / 1e3:.3g} µs"


def mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:.3g} MB"


def r4(x: float) -> float:
    """A share or ratio as evidence carries it."""
    return round(float(x), 4)


def us(ns: float) -> float:
    """ns as evidence carries time: µs with one decimal."""
    return round(float(ns) / 1e3, 1)
