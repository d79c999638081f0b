"""The terminal report: rich renderables composed section by section; only the CLI prints them."""

from __future__ import annotations

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from stepscope.model.report import Report
from stepscope.report.format import count, ms, pct, size

BREAKDOWN_LABELS = {
    "kernel": "kernel", "memcpy": "memcpy", "memset": "memset", "communication": "comm",
    "runtime": "runtime", "dataloader": "dataloader", "cpu_exec": "cpu exec", "other": "other",
}
MAX_STEP_ROWS = 12


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
    for note in [*s.dropped_steps, *report.notes]:
        t.append(f"note: {note}\n", style="dim")
    return t


def summary(report: Report) -> RenderableType:
    s = report.summary
    t = Text()
    t.append("step time ", style="bold")
    t.append(ms(s.step_time_us), style="bold cyan")
    if s.steps_per_s:
        t.append(f"   {s.steps_per_s:,.2f} steps/s")
    if s.samples_per_s:
        t.append(f"   {s.samples_per_s:,.1f} samples/s")
    if s.gpu_utilization is not None:
        t.append("   GPU utilisation ")
        t.append(pct(s.gpu_utilization), style="bold")
    return t


def breakdown(report: Report) -> RenderableType | None:
    if not report.steps:
        return None
    cats = list(BREAKDOWN_LABELS)
    shown = [c for c in cats if any(r.breakdown_us.get(c, 0) > 0 for r in report.steps)] or cats
    table = _table("Step-time breakdown (exclusive, by priority)")
    table.add_column("step", justify="right")
    table.add_column("total", justify="right", style="bold")
    for c in shown:
        table.add_column(BREAKDOWN_LABELS[c], justify="right")
    if report.summary.gpu_utilization is not None:
        table.add_column("GPU util", justify="right")
    rows = report.steps if len(report.steps) <= MAX_STEP_ROWS else report.steps[:MAX_STEP_ROWS]
    for r in rows:
        cells = [r.id, ms(r.duration_us), *(ms(r.breakdown_us.get(c)) for c in shown)]
        if report.summary.gpu_utilization is not None:
            cells.append(pct(r.gpu_utilization))
        table.add_row(*cells)
    s = report.summary
    total = s.step_time_us or 0
    mean_cells = ["mean", ms(s.step_time_us), *(ms(s.breakdown_us.get(c)) for c in shown)]
    share_cells = ["share", "100%", *(pct(s.breakdown_us.get(c, 0) / total if total else None) for c in shown)]
    if s.gpu_utilization is not None:
        mean_cells.append(pct(s.gpu_utilization))
        share_cells.append("")
    table.add_section()
    table.add_row(*mean_cells, style="bold")
    table.add_row(*share_cells, style="dim")
    return table


def gpu_idle(report: Report) -> RenderableType | None:
    if report.gpu is None:
        return None
    table = _table("GPU busy and idle per step")
    for col in ("device", "utilisation", "busy", "idle: host wait", "kernel wait", "other"):
        table.add_column(col, justify="right")
    for d in report.gpu.devices:
        idle = d.idle_us_per_step
        table.add_row(str(d.device), pct(d.utilization, 1), ms(d.busy_us_per_step), ms(idle["host_wait"]),
                      ms(idle["kernel_wait"]), ms(idle["other"]))
    return table


def kernels(report: Report) -> RenderableType | None:
    k = report.kernels
    if k is None:
        return None
    facts = Text()
    facts.append(f"{count(k.count_per_step)} kernels per step ({k.distinct} distinct), {ms(k.time_us_per_step)} "
                 f"of kernel time per step; tensor cores: {pct(k.tensor_core_share)} of kernel time; "
                 f"{pct(k.short_kernel_share)} of kernels under {k.short_kernel_threshold_us:g} µs")
    if k.launch_delay_us:
        d = k.launch_delay_us
        facts.append(f"; launch-to-start delay p50 {ms(d['p50'])}, p90 {ms(d['p90'])}")
    table = _table()
    for col, justify in (("kernel", "left"), ("count", "right"), ("total", "right"), ("mean", "right"),
                         ("share", "right"), ("TC", "center")):
        table.add_column(col, justify=justify, overflow="ellipsis", no_wrap=col == "kernel",
                         max_width=70 if col == "kernel" else None)
    for row in k.top[:8]:
        table.add_row(Text(row.name), count(row.count), ms(row.total_us), ms(row.mean_us), pct(row.share, 1),
                      "yes" if row.tensor_core else "")
    return Group(Text("Kernels", style="bold"), facts, table)


def syncs(report: Report) -> RenderableType | None:
    sy = report.syncs
    if sy is None:
        return None
    table = _table(f"Host-device synchronisation: {count(sy.count_per_step)} per step, {ms(sy.time_us_per_step)}")
    table.add_column("call", overflow="fold")
    table.add_column("per step", justify="right")
    table.add_column("time/step", justify="right")
    for a in sy.apis:
        table.add_row(Text(a.api), count(a.count_per_step), ms(a.time_us_per_step))
    causes = _table("Where the syncs come from")
    for col in ("op", "via", "call", "count", "time"):
        causes.add_column(col, justify="right" if col in ("count", "time") else "left", overflow="fold")
    for c in sy.causes[:6]:
        causes.add_row(Text(c.op), Text(c.inner_op), Text(c.api), str(c.count), ms(c.total_us))
    return Group(table, causes) if sy.causes else table


def copies(report: Report) -> RenderableType | None:
    c = report.copies
    if c is None:
        return None
    table = _table(f"Copies: {count(c.count_per_step)} per step, {size(c.htod_bytes_per_step)} host-to-device "
                   f"per step ({size(c.pageable_htod_bytes_per_step)} from pageable memory)")
    for col in ("direction", "count", "bytes", "time", "bandwidth", "pageable", "pinned"):
        table.add_column(col, justify="left" if col == "direction" else "right")
    for d in c.directions:
        bw = f"{d.bandwidth_gb_s:,.1f} GB/s" if d.bandwidth_gb_s is not None else "-"
        table.add_row(d.direction, str(d.count), size(d.bytes), ms(d.total_us), bw,
                      size(d.pageable_bytes) if d.pageable_count else "-",
                      size(d.pinned_bytes) if d.pinned_count else "-")
    return table


def memory(report: Report) -> RenderableType | None:
    if not report.memory:
        return None
    table = _table("Memory (allocator)")
    for col in ("device", "peak allocated", "peak reserved"):
        table.add_column(col, justify="right")
    for m in report.memory:
        table.add_row("host" if m.device < 0 else str(m.device), size(m.peak_allocated_bytes),
                      size(m.peak_reserved_bytes))
    return table


def recommendations(report: Report) -> RenderableType | None:
    if not report.recommendations:
        return None
    table = _table("Recommendations (estimated gains: reasoned from this trace's timeline, not measured)")
    for col in ("#", "fix", "est. speed-up", "where", "why"):
        table.add_column(col, justify="right" if col in ("#", "est. speed-up") else "left", overflow="fold")
    for i, rec in enumerate(report.recommendations, 1):
        where = f"{rec.location['file']}:{rec.location['line']}" if rec.location else ""
        gain = f"{rec.estimated_speedup:.2f}x" if rec.estimated_speedup else "-"
        table.add_row(str(i), Text(f"{rec.title}\n[{rec.id}]"), gain, Text(where), Text(rec.estimate))
    return table


def ranks(report: Report) -> RenderableType | None:
    from stepscope.report.ranks import terminal_section

    return terminal_section(report)


MAX_LINE_ROWS = 15
MAX_MODULE_ROWS = 20


def _gpu_columns(rows: list) -> bool:
    return any(r.gpu_fwd_us or r.gpu_bwd_us for r in rows)


def source_lines(report: Report) -> RenderableType | None:
    """Time by user line, forward and backward apart; the time no line can take; syncs by line."""
    lines = report.lines
    if lines is None:
        return None
    gpu = _gpu_columns(lines.rows + lines.unattributed)
    where = "function (first line)" if lines.granularity == "function" else "line"
    table = _table(f"Time by source {where}, per step (fwd: the line's own ops; bwd: autograd of the ops it "
                   f"created); {pct(lines.attributed_share)} of host op time found a line")
    columns = ["line", "code", "cpu fwd", "cpu bwd", *(("gpu fwd", "gpu bwd", "kernels") if gpu else ()), "share"]
    for col in columns:
        table.add_column(col, justify="left" if col in ("line", "code") else "right", overflow="fold",
                         max_width=48 if col == "code" else None)
    for r in lines.rows[:MAX_LINE_ROWS] + lines.unattributed[:3]:
        style = "dim" if r.file is None else None
        cells = [Text(r.label), Text(r.code or r.function), ms(r.cpu_fwd_us), ms(r.cpu_bwd_us)]
        if gpu:
            cells += [ms(r.gpu_fwd_us), ms(r.gpu_bwd_us), count(r.kernels)]
        table.add_row(*cells, pct(r.share, 1), style=style)
    if not lines.syncs:
        return table
    syncs_table = _table("Syncs by line" if report.accelerator != "none"
                         else "Scalar reads by line (each would wait for the GPU)")
    for col in ("line", "code", "op", "via", "per step", "time/step"):
        syncs_table.add_column(col, justify="right" if col in ("per step", "time/step") else "left", overflow="fold")
    for y in lines.syncs[:6]:
        label = f"{y.file}:{y.line}" if y.file is not None else "(no user line)"
        syncs_table.add_row(Text(label), Text(y.code), Text(y.op), Text(y.via), count(y.count_per_step),
                            ms(y.time_us_per_step))
    return Group(table, syncs_table)


def source_modules(report: Report) -> RenderableType | None:
    """Time by module path, forward and backward apart, with children (own: without them)."""
    modules = report.modules
    if modules is None or not modules.rows:
        return None
    gpu = _gpu_columns(modules.rows)
    top = sorted(modules.rows, key=lambda m: -m.share)[:MAX_MODULE_ROWS]
    shown = [m for m in modules.rows if m in top]
    table = _table("Time by module, per step (with children; own: without them)")
    columns = ["module", "calls", "cpu fwd", "cpu bwd", *(("gpu fwd", "gpu bwd", "kernels") if gpu else ()),
               "own", "share"]
    for col in columns:
        table.add_column(col, justify="left" if col == "module" else "right", overflow="fold")
    for m in shown:
        cells = [Text(m.path), count(m.calls), ms(m.cpu_fwd_us), ms(m.cpu_bwd_us)]
        if gpu:
            cells += [ms(m.gpu_fwd_us), ms(m.gpu_bwd_us), count(m.kernels)]
        table.add_row(*cells, ms(m.own_gpu_us if gpu else m.own_cpu_us), pct(m.share, 1))
    return table


SECTIONS = (verdict, header, summary, ranks, breakdown, gpu_idle, kernels, syncs, copies, memory, source_lines,
            source_modules, recommendations)


class TerminalRenderer:
    def __init__(self, sections: tuple = SECTIONS) -> None:
        self.sections = sections

    def render(self, report: Report) -> RenderableType:
        parts = [part for section in self.sections if (part := section(report)) is not None]
        return Group(*parts)


def render_terminal(report: Report, console: Console) -> None:
    console.print(TerminalRenderer().render(report))
