"""Terminal sections: utilization (FLOPs, MFU, roofline) and memory at the peak."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from stepscope.model.report import Report
from stepscope.report.format import ms, pct, size
from stepscope.report.usage_text import (
    class_line,
    coverage_line,
    flop_line,
    headroom_line,
    mfu_lines,
    outside_lines,
    peak_title,
    rate,
    short,
)

TOP_POINTS = 8
TOP_LINES = 5


def _table(title: str) -> Table:
    return Table(title=title, title_justify="left", title_style="bold", header_style="bold")


def _lines(lines: list[str | None]) -> Text:
    return Text("\n".join(f"  {line}" for line in lines if line))


def utilization(report: Report) -> RenderableType | None:
    u = report.utilization
    if u is None:
        return None
    parts: list[RenderableType] = [Text("Utilization", style="bold"),
                                   _lines([flop_line(u), *mfu_lines(u), coverage_line(u)])]
    line = u.roofline
    if line is not None and line.classes:
        parts.append(_lines(["of the covered kernel time:", *(f"  {class_line(c)}" for c in line.classes)]))
    if line is not None and line.points:
        table = _table("Kernels against the roofline (per step)")
        for col in ("kernel", "op", "time", "achieved", "GB/s", "FLOP/B", "bound", "of roof"):
            table.add_column(col, justify="left" if col in ("kernel", "op", "bound") else "right", overflow="fold",
                             max_width=40 if col == "kernel" else None)
        for p in line.points[:TOP_POINTS]:
            table.add_row(Text(short(p.kernel)), Text(p.op), ms(p.time_us_per_step), rate(p.tflops), f"{p.gb_s:,.0f}",
                          "-" if p.intensity is None else f"{p.intensity:,.1f}", p.roof, pct(p.roof_share))
        parts.append(table)
    return Group(*parts)


def memory_usage(report: Report) -> RenderableType | None:
    mu = report.memory_usage
    if mu is None:
        return None
    parts: list[RenderableType] = []
    for m in mu.devices:
        table = _table(peak_title(m))
        for col in ("category", "bytes", "share", "what"):
            table.add_column(col, justify="right" if col in ("bytes", "share") else "left", overflow="fold")
        for c in m.categories:
            table.add_row(c.name, size(c.bytes), pct(c.bytes / m.peak_allocated_bytes if m.peak_allocated_bytes
                                                     else None), Text(c.note))
        parts.append(table)
        notes = [*outside_lines(m), headroom_line(m.headroom)]
        if mu.census is None and any(c.name == "persistent" for c in m.categories):
            notes.append("persistent memory is not split: the trace comes without a run census (stepscope run)")
        parts.append(_lines(notes))
        if m.activation_lines:
            lines = _table("Forward lines holding the most activation memory at the peak")
            for col in ("line", "code", "op", "bytes"):
                lines.add_column(col, justify="right" if col == "bytes" else "left", overflow="fold",
                                 max_width=48 if col == "code" else None)
            for a in m.activation_lines[:TOP_LINES]:
                lines.add_row(Text(a.label), Text(a.code), Text(a.op), size(a.bytes))
            parts.append(lines)
    return Group(*parts)
