"""The diff of two runs (`stepscope.diff/1`) rendered: terminal and HTML. The figures in a Diff are computed
by `stepscope.compare.compare`; this module only formats them."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from stepscope.model.diff import Diff
from stepscope.report.palette import BREAKDOWN_LABELS
from stepscope.units import bytes_cell, share_cell, us_cell


def _signed_ms(us: float | None) -> str:
    if us is None:
        return "-"
    return f"+{us_cell(us)}" if us > 0 else (us_cell(us) if us else "0")


def _change(ratio: float | None) -> str:
    if ratio is None:
        return ""
    return f"{(ratio - 1) * 100:+.1f}%"


def headline(diff: Diff) -> Text:
    """Step time before -> after, the speed-up, throughput and GPU utilisation."""
    b, a = diff.before, diff.after
    t = Text()
    t.append("step time ", style="bold")
    t.append(f"{us_cell(b.step_time_us)} -> {us_cell(a.step_time_us)}", style="bold cyan")
    if diff.speedup and abs(diff.speedup - 1) < 0.005:
        t.append("  (no change)")
    elif diff.speedup:
        faster = diff.speedup >= 1
        t.append(f"  ({_change(diff.step_time_ratio)}, {diff.speedup if faster else 1 / diff.speedup:.2f}x "
                 f"{'faster' if faster else 'slower'})", style="green" if faster else "red")
    if diff.throughput_ratio:
        unit = diff.throughput_unit
        before = b.samples_per_s if unit == "samples/s" else b.steps_per_s
        after = a.samples_per_s if unit == "samples/s" else a.steps_per_s
        t.append(f"\n{unit} {before:,.2f} -> {after:,.2f} ({diff.throughput_ratio:.2f}x)")
    if b.gpu_utilization is not None or a.gpu_utilization is not None:
        t.append(f"\nGPU utilisation {share_cell(b.gpu_utilization)} -> {share_cell(a.gpu_utilization)}")
    if b.mfu is not None or a.mfu is not None:
        t.append(f"\nMFU {share_cell(b.mfu, 1)} -> {share_cell(a.mfu, 1)}")
    if b.peak_allocated_bytes is not None or a.peak_allocated_bytes is not None:
        t.append(f"\npeak memory allocated {bytes_cell(b.peak_allocated_bytes)} -> {bytes_cell(a.peak_allocated_bytes)}"
                 f" (reserved {bytes_cell(b.peak_reserved_bytes)} -> {bytes_cell(a.peak_reserved_bytes)})")
    return t


def _pattern_lines(diff: Diff) -> Text | None:
    if not (diff.patterns_appeared or diff.patterns_gone or diff.patterns_kept):
        return None
    t = Text("Patterns\n", style="bold")
    for p in diff.patterns_gone:
        t.append(f"  - {p.id} went away (was {share_cell(p.before_share)})\n", style="green")
    for p in diff.patterns_appeared:
        t.append(f"  + {p.id} appeared ({share_cell(p.after_share)})\n", style="red")
    for p in diff.patterns_kept:
        t.append(f"  = {p.id} {share_cell(p.before_share)} -> {share_cell(p.after_share)}\n")
    return t


def diff_tables(diff: Diff) -> list[dict[str, Any]]:
    """The diff's tables as plain rows (title, columns, rows of (text, raw value)); terminal and HTML draw them."""
    tables = [{
        "title": "Step-time breakdown (per step)", "id": "breakdown",
        "columns": ["category", "before", "after", "delta"],
        "rows": [[(BREAKDOWN_LABELS.get(c.category, c.category), None), (us_cell(c.before_us), c.before_us),
                  (us_cell(c.after_us), c.after_us), (_signed_ms(c.delta_us), c.delta_us)]
                 for c in diff.breakdown if c.before_us or c.after_us],
    }]
    scope = "" if diff.kernel_lists_complete else " (among each run's top kernels)"
    for title, rows in ((f"Kernels that appeared{scope}", diff.kernels_appeared),
                        (f"Kernels that disappeared{scope}", diff.kernels_disappeared),
                        ("Kernels that changed most", diff.kernels_changed)):
        if rows:
            tables.append({
                "title": title, "id": title.split()[2], "columns": ["kernel", "before/step", "after/step", "delta"],
                "rows": [[(k.name, None), (us_cell(k.before_us_per_step), k.before_us_per_step),
                          (us_cell(k.after_us_per_step), k.after_us_per_step),
                          (_signed_ms(k.delta_us_per_step), k.delta_us_per_step)] for k in rows],
            })
    if diff.lines_changed:
        tables.append({
            "title": "Lines whose time changed most", "id": "lines", "columns": ["line", "before", "after", "delta"],
            "rows": [[(f"{r.file}:{r.line} {r.code or r.function}".strip(), None), (us_cell(r.before_us), r.before_us),
                      (us_cell(r.after_us), r.after_us), (_signed_ms(r.delta_us), r.delta_us)]
                     for r in diff.lines_changed],
        })
    return tables


class DiffTerminalRenderer:
    """Diff -> a rich renderable."""

    def render(self, diff: Diff) -> RenderableType:
        parts: list[RenderableType] = [
            Text(f"before: {', '.join(diff.before.paths[:3])}\nafter:  {', '.join(diff.after.paths[:3])}",
                 style="dim"),
            headline(diff),
        ]
        if (patterns := _pattern_lines(diff)) is not None:
            parts.append(patterns)
        for spec in diff_tables(diff):
            table = Table(title=spec["title"], title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                          pad_edge=False)
            for i, col in enumerate(spec["columns"]):
                table.add_column(col, justify="left" if i == 0 else "right", overflow="fold",
                                 max_width=70 if i == 0 else None)
            for row in spec["rows"]:
                table.add_row(*(Text(text) for text, _ in row))
            parts.append(table)
        parts += [Text(f"note: {n}", style="dim") for n in diff.notes]
        return Group(*parts)


def diff_figure(diff: Diff) -> dict[str, Any]:
    """The mean breakdown before and after, side by side."""
    from stepscope.report import figures

    return figures.breakdown_diff_figure({c.category: c.before_us for c in diff.breakdown},
                                         {c.category: c.after_us for c in diff.breakdown})


class DiffHtmlRenderer:
    """Diff -> one self-contained HTML page (bytes)."""

    def render(self, diff: Diff) -> bytes:
        from stepscope.report.html import page

        return page("diff.html.j2", title="stepscope diff", generator=diff.generator or "stepscope",
                    figures={"fig-diff-breakdown": diff_figure(diff)},
                    diff=diff, headline=headline(diff).plain.splitlines(), tables=diff_tables(diff))
