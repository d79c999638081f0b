"""Numbers as text, each function named for the unit it takes and the place its text goes.

Two styles, on purpose:
- `..._text`: prose that advice writes into the verdict, titles and estimates. Time comes in ns (the
  trace's unit) and reads with three significant figures: "3.45 ms".
- `..._cell`: a figure in the report's tables and summary lines. Time comes in µs (the Report's unit) and
  reads with fixed decimals and thousands separators: "3.5 ms"; a missing value reads "-".
Evidence values stay numbers: `us_from_ns` and `rounded_ratio` give them the precision the Report carries.
The Report's own figures are µs with three decimals (`report_us`): the one ns -> µs conversion of the report.
"""

from __future__ import annotations

# --- Prose (advice): the verdict, fix titles, estimates. ---


def ns_text(ns: float) -> str:
    """4_500_000 ns -> '4.5 ms': seconds from 1 s, whole ms from 100 ms, µs under 1 ms."""
    if ns >= 1e9:
        return f"{ns / 1e9:.3g} s"
    if ns >= 1e8:
        return f"{ns / 1e6:.0f} ms"
    return f"{ns / 1e6:.3g} ms" if ns >= 1e6 else f"{ns / 1e3:.3g} µs"


def share_text(share: float) -> str:
    """0.334 -> '33%'; shares under 1% keep one decimal."""
    return f"{share * 100:.1f}%" if 0 < share < 0.01 else f"{share * 100:.0f}%"


def bytes_text(nbytes: float) -> str:
    """2_500_000 bytes -> '2.5 MB' (decimal megabytes, whatever the size)."""
    return f"{nbytes / 1e6:.3g} MB"


# --- Evidence values (advice): numbers, at the precision the Report carries. ---


def us_from_ns(ns: float) -> float:
    """ns as evidence carries time: µs with one decimal."""
    return round(float(ns) / 1e3, 1)


def rounded_ratio(x: float) -> float:
    """A share or ratio as evidence carries it: four decimals."""
    return round(float(x), 4)


# --- The Report's figures. ---


def report_us(ns: float) -> float:
    """ns as the Report carries time: µs with three decimals."""
    return round(float(ns) / 1000.0, 3)


# --- Cells (report/): tables and summary lines. ---


def us_cell(us: float | None) -> str:
    """3_456 µs -> '3.5 ms': whole ms from 100 ms, µs under 1 ms (two decimals under 10 µs)."""
    if us is None:
        return "-"
    if abs(us) >= 100_000:
        return f"{us / 1000:,.0f} ms"
    if abs(us) >= 1000:
        return f"{us / 1000:,.1f} ms"
    return f"{us:,.1f} µs" if abs(us) >= 10 else f"{us:,.2f} µs"


def share_cell(share: float | None, digits: int = 0) -> str:
    """0.334 -> '33%' (or with `digits` decimals)."""
    return "-" if share is None else f"{100 * share:.{digits}f}%"


def bytes_cell(nbytes: float | None) -> str:
    """1_234_567 bytes -> '1.2 MB': decimal units, whole bytes under 1 KB."""
    if nbytes is None:
        return "-"
    value = float(nbytes)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def count_cell(x: float) -> str:
    """A count: whole when it is whole or large, else one decimal (a mean per step)."""
    return f"{x:,.0f}" if float(x).is_integer() or abs(x) >= 100 else f"{x:,.1f}"
