"""A report table drawn in the terminal at the width it is printed at: numbers keep their digits and unit, paths are
cut on the left, prose wraps between words (never inside one: code in a fix stays whole), and the least useful
columns give way first; the columns left out are named."""

from __future__ import annotations

import re

from rich import box
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from stepscope.report.tables import Table as CellTable


def _table(title: str | None = None, **kw: object) -> Table:
    return Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, **kw)


def table(spec: CellTable) -> RenderableType:
    """A report table as a rich Table: as it is when it fits the width it is printed at, else fitted to it
    (see _fitted_table)."""
    return _Fitted(spec)


class _Fitted:
    """A table built for the width it is printed at."""

    def __init__(self, spec: CellTable) -> None:
        self.spec = spec

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        whole = _fitted_table(self.spec, None)
        if Measurement.get(console, options.update(width=10_000), whole).maximum <= options.max_width:
            yield whole
        else:
            yield _fitted_table(self.spec, options.max_width)


# Text columns whose cells are paths: cut on the left, so the file name and line stay ('…/gpt.py:88').
PATH_COLUMNS = ("label", "path", "module", "file", "line", "where")
MIN_TEXT_WIDTH = 10
COMFORTABLE_TEXT_WIDTH = 16  # below it, a droppable column makes room first
PROSE_WIDTH = 40  # a wrapping column (a fix's title, its reasoning) claims its share as if this wide
PATH_WIDTH = 40  # and a path column (cut on the left: the file name and line stay), as wide


# Columns a narrow terminal can do without (the JSON and the HTML page keep them), dropped in this order.
DROPPABLE = ("function", "kernels", "own GPU", "own CPU", "calls", "collective", "tensor cores", "inner op",
             "count", "clock offset", "overlap", "file")


def _fitted_table(spec: CellTable, width: int | None) -> Table:
    """The first `terminal_rows` rows (the HTML page lists them all). Numbers keep their width; text columns
    share what is left, each cut with an ellipsis rather than folded into tall rows (paths on the left); on a
    narrow terminal the least useful columns give way first."""
    out = _table(spec.title or None, caption=spec.note or None, caption_justify="left", caption_style="dim")
    rows = spec.rows if spec.terminal_rows is None else spec.rows[:spec.terminal_rows]
    # A text column empty in every row (no fix has a location) says nothing: it gives its width to the others.
    keep = [i for i, (_, cls) in enumerate(spec.columns)
            if "text" not in cls.split() or not rows or any(row[i].text for row in [*rows, *spec.footer])]
    widths: dict[int, int] = {}
    if width is not None:
        keep, left_out = _columns_that_fit(spec, rows, width, keep)
        widths = _text_widths(spec, rows, width, keep)
        if left_out:
            out.caption = " ".join(filter(None, [spec.note, f"Left out at this width: {', '.join(left_out)} (the "
                                                            "HTML page and the JSON have them)."]))
    for i in keep:
        label, cls = spec.columns[i]
        text, wrap = "text" in cls.split(), _wraps(spec, i)
        out.add_column(_header(label), justify="left" if text else "right", no_wrap=not wrap,
                       overflow="fold" if wrap or not text else "ellipsis", max_width=widths.get(i))
    for row in rows:
        out.add_row(*(Text(_cut(row[i].text, spec.columns[i][0], widths.get(i))) for i in keep))
    if spec.terminal_rows is not None and len(spec.rows) > spec.terminal_rows:
        out.add_row(Text(f"... {len(spec.rows) - spec.terminal_rows} more"), style="dim")
    if spec.footer:
        out.add_section()
        for i, row in enumerate(spec.footer):
            out.add_row(*(Text(row[j].text) for j in keep), style="bold" if i == 0 else "dim")
    return out


def _columns_that_fit(spec: CellTable, rows: list, width: int, keep: list[int]) -> tuple[list[int], list[str]]:
    """The columns to print so that every number keeps its digits and unit: the DROPPABLE ones give way first,
    then the lightest by the footer, then columns from the right (the first two, which say what a row is, always
    stay). Also the labels of the columns left out."""
    natural = {i: max(len(_header(spec.columns[i][0])), *(len(row[i].text) for row in [*rows, *spec.footer]))
               for i in keep}
    floor = {i: _longest_word(spec, rows, i) for i in keep}

    def needed(columns: list[int], text_width: int) -> int:
        return sum(max(min(natural[i], text_width), floor[i]) if "text" in spec.columns[i][1].split()
                   else natural[i] for i in columns) + 3 * len(columns)

    # The table's own and the DROPPABLE columns give way before text is squeezed below a comfortable width; others
    # only when even text at its least does not make the numbers fit.
    names = (*spec.drop_first, *DROPPABLE)
    phases = [([i for name in names for i in keep if spec.columns[i][0] == name], COMFORTABLE_TEXT_WIDTH)]
    order: list[int] = []
    if spec.footer:  # its first row weighs the columns: a 3 µs memset gives way before a 30 ms DataLoader wait
        weight = {i: spec.footer[0][i].value for i in keep[2:]}
        order += sorted(weight, key=lambda i: -1.0 if weight[i] is None else float(weight[i]))  # type: ignore[arg-type]
    phases.append((order + keep[:1:-1], MIN_TEXT_WIDTH))
    left_out: list[str] = []
    for candidates, text_width in phases:
        for i in candidates:
            if needed(keep, text_width) <= width:
                break
            if i in keep and spec.columns[i][0] not in spec.keep:
                keep = [j for j in keep if j != i]
                left_out.append(_header(spec.columns[i][0]))
    return keep, left_out


def _text_widths(spec: CellTable, rows: list, width: int, keep: list[int]) -> dict[int, int]:
    """Column index -> width for the kept text columns: what the numeric columns leave (at least
    MIN_TEXT_WIDTH each; _columns_that_fit chose the columns so that it is), shared by natural width."""
    longest = {i: max([len(_header(spec.columns[i][0])), *(len(row[i].text) for row in rows)]) for i in keep}
    # Prose wraps and a path is cut on the left: each claims its share as if a comfortable width long, then
    # takes what is left over.
    claims = {i: PROSE_WIDTH if _wraps(spec, i) else PATH_WIDTH for i in keep
              if _wraps(spec, i) or spec.columns[i][0] in PATH_COLUMNS}
    natural = {i: min(n, claims.get(i, n)) for i, n in longest.items()}
    texts = [i for i in keep if "text" in spec.columns[i][1].split()]
    if not texts:
        return {}  # numbers only: nothing to cut or drop
    # Columns are padded by one on each inner side and the box puts a space between columns and at the edges.
    free = width - sum(natural[i] for i in keep if i not in texts) - (3 * len(keep) - 1) - 1
    free = max(free, MIN_TEXT_WIDTH * len(texts))
    total = sum(natural[i] for i in texts) or 1
    out = {}
    floor = {i: _longest_word(spec, rows, i) for i in texts}
    for i in texts:
        cap = 70 if "name" in spec.columns[i][1].split() else natural[i]
        out[i] = max(floor[i], min(natural[i], cap, max(MIN_TEXT_WIDTH, free * natural[i] // total)))
    for i in sorted(texts, key=lambda j: -out[j]):  # the minimums may overshoot: the widest give it back
        out[i] = max(MIN_TEXT_WIDTH, floor[i], out[i] - max(sum(out.values()) - free, 0))
    # The width no column claimed goes to the prose and paths, in proportion to what each lacks for its longest cell.
    spare = max(0, free - sum(out.values()))
    lacking = {i: longest[i] - out[i] for i in claims if i in out and longest[i] > out[i]}
    for i, lack in lacking.items():
        out[i] += min(lack, spare * lack // sum(lacking.values()))
    return out


LONGEST_WORD = 32  # a wrapping column is never narrower than its longest word, up to this: code stays whole


def _longest_word(spec: CellTable, rows: list, column: int) -> int:
    """For a column of prose, its longest word (`mode='reduce-overhead'))`), which wrapping must not cut; 0 for
    other columns (numbers keep their width anyway, other text is cut with an ellipsis)."""
    if not _wraps(spec, column):
        return 0
    return min(LONGEST_WORD, max((len(w) for row in rows for w in row[column].text.split()), default=0))


def _wraps(spec: CellTable, column: int) -> bool:
    """A column of prose (a fix's title, its reasoning): it wraps rather than being cut."""
    return "wrap" in spec.columns[column][1].split() or any(
        "wrap" in (row[column].cls or "").split() for row in spec.rows[:1])


def _header(label: str) -> str:
    """'cpu fwd us' -> 'cpu fwd': the cells carry their unit."""
    return label.removesuffix(" us")


def _cut(text: str, column: str, width: int | None) -> str:
    """A path cut on the left (its file and line stay); other text is left to the column's ellipsis."""
    if width is None or len(text) <= width or column not in PATH_COLUMNS or not re.search(r"[/\\]|\.py\b", text):
        return text
    return "…" + text[-(width - 1):]
