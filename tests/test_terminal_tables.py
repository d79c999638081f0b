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
