"""Numbers as text: the verdict's prose (from ns, three significant figures) and the report's cells (from µs,
fixed decimals), the same time written both ways."""

from __future__ import annotations

import pytest

from stepscope.units import (
    bytes_cell,
    bytes_text,
    count_cell,
    ns_text,
    rounded_ratio,
    share_cell,
    share_text,
    us_cell,
    us_from_ns,
)


@pytest.mark.parametrize(("ns", "text", "cell"), [
    (3_456_000, "3.46 ms", "3.5 ms"),  # 3.456 ms: three figures in prose, one decimal in a table
    (250_000_000, "250 ms", "250 ms"),
    (2_500_000_000, "2.5 s", "2,500 ms"),
    (45_000, "45 µs", "45.0 µs"),
    (5_000, "5 µs", "5.00 µs"),
])
def test_one_time_in_both_styles(ns: int, text: str, cell: str) -> None:
    assert ns_text(ns) == text
    assert us_cell(ns / 1000) == cell


def test_shares_bytes_counts_and_evidence() -> None:
    assert (share_text(0.334), share_text(0.004), share_text(0.0)) == ("33%", "0.4%", "0%")
    assert (share_cell(0.334), share_cell(0.1234, 1), share_cell(None)) == ("33%", "12.3%", "-")
    assert bytes_text(2_500_000) == "2.5 MB"
    assert (bytes_cell(999), bytes_cell(1_234_567), bytes_cell(None)) == ("999 B", "1.2 MB", "-")
    assert (count_cell(3), count_cell(2.5), count_cell(150.4)) == ("3", "2.5", "150")
    assert (us_from_ns(1_234_567), rounded_ratio(0.123456)) == (1234.6, 0.1235)
    assert us_cell(None) == "-"
