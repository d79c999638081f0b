"""The terminal report: the verdict panel, the header, then every section of report.sections drawn as rich
renderables (the HTML page draws the same sections); only the CLI prints them."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from stepscope.model.report import Report
from stepscope.report import sections as sec
from stepscope.report.format import pct
from stepscope.report.tables import Table as CellTable


def make_console(width: int | None = None, stderr: bool = False) -> Console:
    return Console(width=width, stderr=stderr, highlight=False)


def _table(title: str | None = None, **kw: object) -> Table:
    return Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, **kw)


def verdict(report: Report) -> RenderableType | None:
    """The five-second read: the pattern, what it costs, and the top fixes."""
    if not report.patterns:
        return None
    main = report.patterns[0]
    lines = Text()
    lines.append(main.id.replace("_", " ").upper(), style="bold red")
    lines.append(f"  costs about {pct(main.share)} of each step")
    if main.title:
        lines.append(f"\n{main.title}")
    for other in report.patterns[1:3]:
        lines.append(f"\nalso {other.id.replace('_', ' ')} ({pct(other.share)})", style="yellow")
    if report.recommendations:
        lines.append("\n\nTop fixes (estimated):", style="bold")
        for i, rec in enumerate(report.recommendations[:3], 1):
            gain = f"  ~{rec.estimated_speedup:.2f}x" if rec.estimated_speedup else ""
            where = f"  [{rec.location['file']}:{rec.location['line']}]" if rec.location else ""
            lines.append(f"\n {i}. {rec.title}")
            lines.append(gain, style="green")
            lines.append(where, style="cyan")
    return Panel(lines, title="verdict", title_align="left", border_style="red", expand=False)


def header(report: Report) -> RenderableType:
    t = Text()
    t.append("stepscope", style="bold")
    t.append(f"  {', '.join(report.source.paths[:3])}{' ...' if len(report.source.paths) > 3 else ''}")
    t.append(f"  ({report.source.format})\n", style="dim")
    for d in report.devices[:4]:
        parts = [d.name, d.kind]
        if d.compute_capability:
            parts.append(f"cc {d.compute_capability}")
        if d.sm_count:
            parts.append(f"{d.sm_count} SMs")
        if d.total_memory_bytes:
            parts.append(f"{d.total_memory_bytes / 2**30:.0f} GiB")
        label = "device" if d.id is None else f"device {d.id}"
        t.append(f"{label}: " + ", ".join(parts) + "\n")
    if report.rank is not None:
        t.append(f"rank {report.rank}" + (f" of {report.world_size}" if report.world_size else "") + "\n")
    s = report.summary
    ids = [r.id for r in report.steps]
    t.append(f"steps: {len(ids)} ({s.step_source})" + (f": {', '.join(ids[:8])}" if ids else "") + "\n")
    return t


def summary(report: Report) -> RenderableType:
    t = Text()
    for i, (label, value) in enumerate(sec.headline(report)):
        t.append("   " if i else "")
        t.append(f"{label} ", style="bold" if i == 0 else None)
        t.append(value, style="bold cyan" if i == 0 else "bold")
    return t


def sections(report: Report, telemetry: dict[str, Any] | None = None) -> RenderableType | None:
    """Every section of the report that has something to print, in the spec's order."""
    parts = [render_section(x) for x in sec.build(report, telemetry) if not x.figure_only]
    return Group(*parts) if parts else None


def render_section(section: sec.Section) -> RenderableType:
    parts: list[RenderableType] = [Text(f"\n{section.title}", style="bold")]
    if section.intro:
        parts.append(Text(section.intro, style="dim"))
    parts += [Text(line) for line in section.lead]
    parts += [table(x) for x in section.tables]
    parts += [Text(line) for line in section.lines]
    if section.items:
        items = Table.grid(padding=(0, 2))
        items.add_column(style="dim")
        items.add_column(overflow="fold")
        for label, text in section.items:
            items.add_row(label, Text(text))
        parts.append(items)
    return Group(*parts)


def table(spec: CellTable) -> RenderableType:
    """A report table as a rich Table: the first `terminal_rows` rows (the HTML page lists them all)."""
    out = _table(spec.title or None, caption=spec.note or None, caption_justify="left", caption_style="dim")
    for label, cls in spec.columns:
        classes = cls.split()
        out.add_column(label, justify="left" if "text" in classes else "right",
                       overflow="ellipsis" if "name" in classes else "fold", no_wrap="name" in classes,
                       max_width=70 if "name" in classes else 48 if label == "code" else None)
    rows = spec.rows if spec.terminal_rows is None else spec.rows[:spec.terminal_rows]
    for row in rows:
        out.add_row(*(Text(c.text) for c in row))
    if spec.terminal_rows is not None and len(spec.rows) > spec.terminal_rows:
        out.add_row(Text(f"... {len(spec.rows) - spec.terminal_rows} more"), style="dim")
    if spec.footer:
        out.add_section()
        for i, row in enumerate(spec.footer):
            out.add_row(*(Text(c.text) for c in row), style="bold" if i == 0 else "dim")
    return out


class TerminalRenderer:
    def __init__(self, telemetry: dict[str, Any] | None = None) -> None:
        self.telemetry = telemetry  # a run's telemetry.json, decoded: the run section mentions it

    def render(self, report: Report) -> RenderableType:
        parts = [verdict(report), header(report), summary(report), sections(report, self.telemetry)]
        return Group(*(p for p in parts if p is not None))


def render_terminal(report: Report, console: Console) -> None:
    console.print(TerminalRenderer().render(report))
