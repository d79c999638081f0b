"""Number formatting shared by the text renderers."""

from __future__ import annotations


def ms(us: float | None) -> str:
    if us is None:
        return "-"
    if abs(us) >= 100_000:
        return f"{us / 1000:,.0f} ms"
    if abs(us) >= 1000:
        return f"{us / 1000:,.1f} ms"
    return f"{us:,.1f} µs" if abs(us) >= 10 else f"{us:,.2f} µs"


def pct(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def size(nbytes: float | None) -> str:
    if nbytes is None:
        return "-"
    value = float(nbytes)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def count(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() or abs(x) >= 100 else f"{x:,.1f}"
