"""The report's sections, specified once for every renderer: the terminal and the HTML page both walk
SECTIONS in order and draw each Section their own way, so their titles, columns and contents cannot drift.

A section function takes the Report (and the run's telemetry, when there is one) and returns a
Section or None when the report has nothing for it. Sections select and format; they compute no figure
beyond a share of two the Report holds (docs/architecture.md). A new report section is one function here (plus,
for a chart, a figure in report/figures.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from stepscope.model.report import Report
from stepscope.model.telemetry import TelemetryReport
from stepscope.report import figures, usage_figures
from stepscope.report import meter_table as mt
from stepscope.report import prediction as pred
from stepscope.report import ranks as rk
from stepscope.report import tables as t
from stepscope.report import usage_tables as ut
from stepscope.units import count_cell, share_cell, us_cell


@dataclass(frozen=True)
class Section:
    """One section of the report, as both renderers walk it."""

    id: str  # the HTML anchor
    title: str
    intro: str = ""  # how to read it, one or two sentences
    tables: tuple[t.Table, ...] = ()
    items: tuple[tuple[str, str], ...] = ()  # (label, text) pairs, e.g. a run's settings
    lead: tuple[str, ...] = ()  # the statements that come before the tables (the headline figures)
    figure: figures.Figure | None = None  # the plotly figure, drawn by build(charts=True) from `chart` (HTML only)
    chart: Callable[[], figures.Figure | None] | None = None  # draws `figure`: called only where charts are shown
    lines: tuple[str, ...] = ()  # short statements, each on its own line
    detail: tuple[str, ...] = ()  # lines after them that the console counts and the page and report.txt show
    detail_label: str = ""  # what the detail lines are, in words
    figure_only: bool = False  # nothing to print without the chart (the terminal skips it)
    extra: dict[str, Any] = field(default_factory=dict)  # what a renderer's special layout needs


SectionFn = Callable[[Report, "TelemetryReport | None"], "Section | list[Section] | None"]


def recommendations(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    recs = report.recommendations
    if not recs:
        return None
    rows = [[t.Cell(str(i)), t.Cell(f"{r.title} [{r.id}]", None, "text wrap"),
             t.Cell(f"{r.estimated_speedup:.2f}x" if r.estimated_speedup else "-", r.estimated_speedup),
             t.Cell(t.where(r.location), None, "text mono"), t.Cell(r.estimate, None, "text wrap")]
            for i, r in enumerate(recs, 1)]
    table = t.Table([("#", ""), ("fix", "text"), ("est. speed-up", ""), ("where", "text"), ("why", "text")], rows,
                    id="recommendations")
    return Section("recommendations", "Recommendations",
                   "Estimated gains are reasoned from this trace's timeline, not measured "
                   "(`stepscope tune` measures them).", tables=(table,), extra={"recommendations": recs})


def considered(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    """The fixes the advice weighed and left out, each with why (a CPU run's threads, layout, precision)."""
    if not report.considered:
        return None
    rows = [[t.Cell(c.id, None, "text mono"), t.Cell(c.reason, None, "text wrap")] for c in report.considered]
    table = t.Table([("fix", "text"), ("why it is not recommended", "text")], rows, id="considered")
    intro = ("No fix is recommended. " if not report.recommendations else "") + \
        "Weighed for this run and left out:"
    return Section("considered", "Considered, not recommended", intro, tables=(table,))


def ranks(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    """The job across its ranks: the straggler and why, waits, exposed communication (docs/distributed.md)."""
    tables = rk.rank_tables(report)
    if not tables:
        return None
    return Section("ranks", "Ranks", rk.INTRO, lead=tuple(rk.lead(report)), tables=tuple(tables),
                   chart=partial(rk.heatmap_figure, report),
                   lines=tuple(report.cross_rank.notes if report.cross_rank else ()))


def meter(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    table = mt.meter_table(report)
    if table is None:
        return None
    return Section("meter", "The job, measured unprofiled (step meter)", mt.INTRO, lead=tuple(mt.meter_lead(report)),
                   tables=(table,))


def breakdown(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    table = t.breakdown_table(report)
    if table is None:
        return None
    return Section("breakdown", "Step-time breakdown",
                   "Exclusive by priority: kernel > memcpy > memset > communication > runtime > DataLoader > "
                   "CPU ops > other; the parts add up to the step.",
                   tables=(table,), chart=partial(figures.breakdown_figure, report))


def gpu(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    table = t.gpu_table(report)
    if table is None:
        return None
    return Section("gpu", "GPU utilisation and idle causes",
                   "Busy: at least one kernel running. Idle split per device: host wait (the next kernel was not "
                   "launched yet), kernel wait (gaps under 30 ns between queued kernels), other (events, copies, "
                   "syncs).", tables=(table,), chart=partial(figures.gpu_figure, report))


def timeline(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    tl = report.timeline
    if tl is None or not tl.rows:  # no chart (figures.timeline_figure), and nothing else to show
        return None
    left_out = (f" The {count_cell(tl.left_out)} shortest spans are left out to keep the page small."
                if tl.left_out else "")
    return Section("timeline", f"Timeline of step {tl.step_id} (the median step, {us_cell(tl.duration_us)})",
                   "Host threads (ops by nesting level, then runtime calls) and GPU streams; the GPU's idle gaps "
                   "coloured by cause; sync calls marked ×. Drag to zoom, double-click to reset." + left_out,
                   chart=partial(figures.timeline_figure, tl), figure_only=True)


def lines(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    tables = t.lines_tables(report)
    if not tables:
        return None
    return Section("lines", "Time by source line",
                   "Per step. fwd: the line's own ops; bwd: the autograd of the ops it created.", tables=tuple(tables))


def modules(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    table = t.modules_table(report)
    return None if table is None else Section("modules", "Time by module", tables=(table,))


def syncs(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    tables = t.sync_tables(report)
    return Section("syncs", "Host-device synchronisation", tables=tuple(tables)) if tables else None


def kernels(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    table = t.kernels_table(report)
    return None if table is None else Section("kernels", "Kernels", tables=(table,))


def copies(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    table = t.copies_table(report)
    return None if table is None else Section("copies", "Copies", tables=(table,))


def memory(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    table = t.memory_table(report)
    return None if table is None else Section("memory", "Memory (allocator peaks)", tables=(table,))


def run(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    """How a live capture went (`stepscope run`, the API, callbacks): shown the same by `run` and `report`."""
    lines = t.run_summary(report)
    if not lines and (telemetry is None or not telemetry.samples):  # nor a chart (figures.telemetry_figure)
        return None
    return Section("run", "The run", lines=tuple(lines), chart=partial(figures.telemetry_figure, telemetry))


def prediction(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    table = pred.prediction_table(report)
    if table is None:
        return None
    return Section("prediction", pred.TITLE, pred.INTRO, tables=(table,),
                   chart=partial(figures.prediction_figure, report), lines=tuple(pred.prediction_lines(report)),
                   detail=tuple(pred.prediction_detail(report)),
                   detail_label="The assumptions, the model and its sources")


def utilization(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    if report.utilization is None:
        return None
    tables = [ut.peaks_table(report), ut.roofline_table(report), ut.uncovered_table(report)]
    if tables[1] is not None:
        tables[1] = replace(tables[1], terminal_rows=8)
    return Section("utilization", "Utilization: FLOPs, MFU and the roofline",
                   "The roofline chart: kernels as points sized by time; each dtype's roof in its own colour and "
                   "dash, the datasheet's drawn full and the measured achievable ones faint.",
                   lead=tuple(ut.utilization_items(report)),
                   tables=tuple(x for x in tables if x is not None),
                   chart=partial(usage_figures.roofline_figure, report))


def memory_usage(report: Report, telemetry: TelemetryReport | None = None) -> list[Section] | None:
    mu = report.memory_usage
    if mu is None:
        return None
    result = []
    for m in mu.devices:
        tables = [replace(x, terminal_rows=5) if x.id.startswith("activation-lines") else x
                  for x in ut.memory_device_tables(m)]
        lines = ut.memory_items(m)
        if mu.census is None and any(c.name == "persistent" for c in m.categories):
            lines.append("persistent memory is not split: the trace comes without a run census (stepscope run)")
        where = "host" if m.device < 0 else f"device {m.device}"
        result.append(Section(f"memory-usage-{'host' if m.device < 0 else m.device}", f"Memory at the peak ({where})",
                              tables=tuple(tables), lines=tuple(lines), chart=partial(usage_figures.memory_figure, m)))
    return result


def notes(report: Report, telemetry: TelemetryReport | None = None) -> Section | None:
    all_notes = [*report.summary.dropped_steps, *report.notes]
    return Section("notes", "Notes", lines=tuple(all_notes)) if all_notes else None


# In the order a reader asks: what to change and its caveats; where the step's time goes; where in the code; the GPU
# work in detail; memory; other GPUs; how the capture went.
SECTIONS: tuple[SectionFn, ...] = (
    recommendations, considered, notes, ranks, meter, breakdown, gpu, timeline, lines, modules, syncs, copies, kernels,
    utilization, memory, memory_usage, prediction, run)


def build(report: Report, telemetry: TelemetryReport | None = None,
          sections: tuple[SectionFn, ...] = SECTIONS, charts: bool = False) -> list[Section]:
    """The report's sections, in order, leaving out those it has nothing for; with `charts`, each one's figure drawn
    (only the HTML page shows them: plotly's figures were most of the terminal report's time)."""
    built: list[Section] = []
    for fn in sections:
        found = fn(report, telemetry)
        built += found if isinstance(found, list) else [found] if found is not None else []
    return [replace(x, figure=x.chart()) if charts and x.chart else x for x in built]


def headline(report: Report) -> list[tuple[str, str]]:
    """The figures a reader looks for first: step time, throughput, GPU utilisation, MFU. The terminal's verdict
    panel and the page's cards both show these, so they cannot disagree."""
    s = report.summary
    cards = [("step time", us_cell(s.step_time_us))]
    if s.steps_per_s:
        cards.append(("steps/s", f"{s.steps_per_s:,.2f}"))
    if s.samples_per_s:
        cards.append(("samples/s", f"{s.samples_per_s:,.1f}"))
    if s.gpu_utilization is not None:
        cards.append(("GPU utilisation", share_cell(s.gpu_utilization)))
    mfu = report.utilization.mfu if report.utilization is not None else None
    if mfu is not None:
        cards.append(("MFU", share_cell(mfu, 1)))
    return cards
