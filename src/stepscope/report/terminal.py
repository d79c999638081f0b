"""The terminal report: first the answer (the verdict, the step's figures and the top fixes, in one panel that fits a
24-line screen at 80 columns), then the header, then every section of report.sections drawn as rich renderables (the
HTML page draws the same sections); only the CLI prints them."""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from stepscope.model.report import Recommendation, Report
from stepscope.model.telemetry import TelemetryReport
from stepscope.report import sections as sec
from stepscope.report.fit import table
from stepscope.report.tables import where
from stepscope.units import share_cell

TOP_FIXES = 3  # in the verdict panel; the recommendations section lists them all


def make_console(width: int | None = None, stderr: bool = False) -> Console:
    # No emoji codes: the report's own strings have none, and rich would load its table of them (~2 ms) to look.
    return Console(width=width, stderr=stderr, highlight=False, emoji=False)


def verdict(report: Report) -> RenderableType:
    """The five-second read: the pattern and what it costs, the step's figures, and the top fixes."""
    body = Text()
    if report.patterns:
        main = report.patterns[0]
        body.append(main.id.replace("_", " ").upper(), style="bold red")
        body.append(f"  costs about {share_cell(main.share)} of each step")
        if main.title:
            body.append(f"\n{main.title}")
        others = report.patterns[1:3]
        if others:
            body.append("\nalso " + ", ".join(f"{p.id.replace('_', ' ')} ({share_cell(p.share)})" for p in others),
                        style="yellow")
    else:
        body.append("NO BOTTLENECK PATTERN FOUND", style="bold")
        body.append("\nThe breakdown below shows where each step's time goes.")
    parts: list[RenderableType] = [body, Text(), summary(report)]
    if report.recommendations:
        parts += [Text(), Text("Top fixes (estimated from the trace; `stepscope tune` measures them):", style="bold"),
                  fixes(report.recommendations[:TOP_FIXES], detail=False)]
    elif report.considered:
        parts += [Text(), Text(f"No fix recommended; considered: {', '.join(c.id for c in report.considered)} "
                               "(why each was left out: below)", style="bold")]
    return Panel(Group(*parts), title=Text("verdict"), title_align="left",
                 border_style="red" if report.patterns else "dim", expand=False)


def fixes(recs: list[Recommendation], detail: bool = True, first: int = 1) -> RenderableType:
    """Numbered fixes with their estimated gain in a column of its own, the text beside it wrapping between words,
    so that code in a title (`mode='reduce-overhead'`) is never cut inside a token; with `detail`, the source line
    and the reasoning under each."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(style="green", no_wrap=True)
    grid.add_column(overflow="fold")  # fold only a word longer than the whole column
    for i, rec in enumerate(recs, first):
        gain = f"~{rec.estimated_speedup:.2f}x" if rec.estimated_speedup else ""
        title = Text(rec.title)
        title.append(f" [{rec.id}]", style="dim")
        if rec.location and not detail:
            title.append(f" at {rec.location.label}", style="cyan")
        grid.add_row(f"{i}.", gain, title)
        if detail and rec.location:
            grid.add_row("", "", Text(f"at {where(rec.location)}", style="cyan"))
        if detail and rec.estimate:
            grid.add_row("", "", Text(rec.estimate, style="dim"))
    return grid


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
    t.append(f"steps: {len(ids)} ({s.step_source})" + (f": {', '.join(ids[:8])}" if ids else "")
             + (", ..." if len(ids) > 8 else ""))
    return t


def summary(report: Report) -> Text:
    """The step's headline figures on one line (sections.headline: the HTML page's cards show the same)."""
    t = Text()
    for i, (label, value) in enumerate(sec.headline(report)):
        t.append("   " if i else "")
        t.append(f"{label} ", style="bold" if i == 0 else None)
        t.append(value, style="bold cyan" if i == 0 else "bold")
    return t


def sections(report: Report, telemetry: TelemetryReport | None = None, full: bool = False) -> RenderableType | None:
    """Every section of the report that has something to print, in the spec's order."""
    parts = [render_section(x, full) for x in sec.build(report, telemetry) if not x.figure_only]
    return Group(*parts) if parts else None


def render_section(section: sec.Section, full: bool = False) -> RenderableType:
    """A section: its title, intro and statements, its tables fitted to the width; a section's `detail` lines
    (assumptions, sources) are printed with `full` and otherwise counted in one line."""
    parts: list[RenderableType] = [Text(f"\n{section.title}", style="bold")]
    if section.intro:
        parts.append(Text(section.intro, style="dim"))
    parts += [Text(line) for line in section.lead]
    if section.id == "recommendations":
        parts.append(fixes(section.extra["recommendations"]))
    else:
        parts += [table(x) for x in section.tables]
    parts += [Text(line) for line in section.lines]
    if full:
        parts += [Text(line) for line in section.detail]
    elif section.detail:
        parts.append(Text(f"{section.detail_label or 'More'} ({len(section.detail)} lines): in the HTML page and the "
                          "JSON", style="dim"))
    if section.items:
        items = Table.grid(padding=(0, 2))
        items.add_column(style="dim")
        items.add_column(overflow="fold")
        for label, text in section.items:
            items.add_row(label, Text(text))
        parts.append(items)
    return Group(*parts)


class TerminalRenderer:
    """Report -> a rich renderable. `full`: every section's detail lines too (report.txt); the console counts them."""

    def __init__(self, telemetry: TelemetryReport | None = None, full: bool = False) -> None:
        self.telemetry = telemetry  # a run's telemetry.json: the run section mentions it
        self.full = full

    def render(self, report: Report) -> RenderableType:
        parts = [verdict(report), header(report), sections(report, self.telemetry, self.full)]
        return Group(*(p for p in parts if p is not None))


def render_terminal(report: Report, console: Console) -> None:
    """The whole report as text (report.txt): the sections' detail lines included."""
    console.print(TerminalRenderer(full=True).render(report))
