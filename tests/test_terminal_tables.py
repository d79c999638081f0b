"""How the terminal fits a report table to its width (report/terminal.py), on tables built by hand."""

from __future__ import annotations

import io

from rich.console import Console

from stepscope.report.tables import Cell, Table
from stepscope.report.terminal import table

PROSE = "Batch 2x bigger: launch and sync time per step stays, data loading and GPU work grow 2x. " * 2


def _text(spec: Table, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, record=True)
    console.print(table(spec))
    return console.export_text()


def _fixes(where: list[str]) -> Table:
    rows = [[Cell(str(i + 1)), Cell(f"Use a bigger batch, fix number {i + 1} [larger_batch]", None, "text wrap"),
             Cell("1.50x", 1.5), Cell(w, None, "text mono"), Cell(PROSE, None, "text wrap")]
            for i, w in enumerate(where)]
    return Table([("#", ""), ("fix", "text"), ("est. speed-up", ""), ("where", "text"), ("why", "text")], rows)


def test_a_text_column_empty_in_every_row_is_left_out() -> None:
    text = _text(_fixes(["", ""]), 80)
    header = next(line for line in text.splitlines() if "fix" in line)
    assert "where" not in header and "why" in header
    assert max(len(line) for line in text.splitlines()) <= 80


def test_locations_keep_their_line_and_prose_shares_the_rest() -> None:
    where = ["examples/a_rather_long_folder_name/pattern_sync_bound.py:54 (main)", ""]
    text = _text(_fixes(where), 80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any("…" in line and ".py:54 (main)" in line for line in lines)  # cut on the left
    # Both prose columns get a readable share: 80 columns less the numbers (#, 1.50x) and the location's share
    # (each of the three claims as if 40 wide: 51 free columns, 17 each).
    header = next(line for line in lines if "fix" in line)
    fix_width = header.index("est. speed-up") - header.index("fix") - 3  # less the padding between columns
    why_width = max(len(line.rstrip()) for line in lines) - header.index("why")
    assert fix_width >= 15 and why_width >= 15, (fix_width, why_width)


def test_a_table_that_fits_is_printed_whole() -> None:
    spec = Table([("name", "text"), ("time", "")], [[Cell("aten::mm"), Cell("1.0 ms", 1.0)]])
    assert "aten::mm" in _text(spec, 80) and "1.0 ms" in _text(spec, 80)


def test_numbers_keep_their_digits_and_units_and_light_columns_give_way() -> None:
    """Twelve 9-character numbers do not fit 80 columns: columns are left out, never cut, and with a footer the
    lightest by its first row go first (the breakdown's mean row), the first two columns always staying."""
    labels = ["step", "total", "kernel", "memcpy", "memset", "runtime", "DataLoader", "CPU ops", "other", "GPU util",
              "syncs", "kernels"]
    means = [None, 38500.0, 159.9, 86.0, 3.02, 932.0, 29700.0, 5000.0, 2600.0, 0.17, None, None]
    cells = ["7", "46.5 ms", "159.5 µs", "89.8 µs", "3.07 µs", "922.4 µs", "28.8 ms", "4.8 ms", "11.7 ms", "0%", "2",
             "208"]
    spec = Table([(label, "text" if label == "step" else "") for label in labels], [[Cell(c) for c in cells]],
                 footer=[[Cell("mean", None, "text"), *(Cell(f"{m}", m) for m in means[1:])]])
    text = _text(spec, 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    row = next(line for line in text.splitlines() if line.startswith(" 7 "))
    kept = ["46.5 ms", "28.8 ms", "4.8 ms", "11.7 ms", "922.4 µs"]
    assert all(f" {c} " in f"{row} " for c in kept), row  # whole, with their units
    assert "3.07 µs" not in row and "89.8 µs" not in row  # memset and memcpy weigh least: left out
    assert "Left out at this width: kernels, syncs" in " ".join(text.split())
