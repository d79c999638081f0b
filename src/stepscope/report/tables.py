"""The report's tables and evidence lists, formatted from a Report for every renderer (the terminal and the HTML
page draw the same Table); numbers keep their raw value for sorting."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from stepscope.model.kinds import Location
from stepscope.model.report import Report
from stepscope.report.evidence import label, value_text
from stepscope.report.names import short_kernel
from stepscope.report.palette import BREAKDOWN_COLORS, BREAKDOWN_LABELS
from stepscope.units import bytes_cell, count_cell, share_cell, us_cell


@dataclass(frozen=True)
class Cell:
    """One table cell: its text, the number behind it, its class and hover text."""

    text: str
    value: float | None = None  # the raw number, for sorting
    cls: str = ""
    title: str = ""  # the whole text when `text` shortens it (a kernel's template arguments elided): the page's hover


@dataclass(frozen=True)
class Table:
    """A table both the terminal and the HTML page draw."""

    columns: list[tuple[str, str]]  # (label, class): "text" left-aligned; "name" long names; "wrap" long prose
    rows: list[list[Cell]]
    title: str = ""
    id: str = ""
    note: str = ""
    footer: list[list[Cell]] = field(default_factory=list)  # summary rows (a mean, the shares)
    terminal_rows: int | None = None  # rows the terminal shows (the page shows all, sortable)
    drop_first: tuple[str, ...] = ()  # columns a narrow terminal leaves out first, in this order (then DROPPABLE)
    keep: tuple[str, ...] = ()  # columns a narrow terminal never leaves out (it squeezes their text instead)


def kernel_cell(name: str) -> Cell:
    """A kernel's name with its C++ template arguments and parameters elided; the whole name in the hover."""
    short = short_kernel(name)
    return Cell(short, None, "text name mono", name if short != name else "")


def where(location: Location | None) -> str:
    if location is None:
        return ""
    return f"{location.label} ({location.function})" if location.function else location.label


def _num(x: float | None, text: str) -> Cell:
    return Cell(text, x)


def breakdown_table(report: Report) -> Table | None:
    if not report.steps:
        return None
    cats = [c for c in BREAKDOWN_COLORS if any(r.breakdown_us.get(c) for r in report.steps)]
    gpu = report.accelerator != "none"  # a CPU-only run has no GPU utilisation, syncs or kernels to show
    rows = [[Cell(r.id, None, "text"), _num(r.duration_us, us_cell(r.duration_us)),
             *(_num(r.breakdown_us.get(c, 0.0), us_cell(r.breakdown_us.get(c, 0.0))) for c in cats),
             *((_num(r.gpu_utilization, share_cell(r.gpu_utilization)), _num(r.sync_count, str(r.sync_count)),
                _num(r.kernel_count, str(r.kernel_count))) if gpu else ())] for r in report.steps]
    columns = [("step", "text"), ("total", ""), *((BREAKDOWN_LABELS[c], "") for c in cats),
               *((("GPU util", ""), ("syncs", ""), ("kernels", "")) if gpu else ())]
    s = report.summary
    total = s.step_time_us or 0
    # With the step meter the summary row is the job unprofiled (its parts fitted to the meter's step), not the mean
    # of the profiled rows above it.
    label = "unprofiled" if report.meter is not None else "mean"
    footer = [[Cell(label, None, "text"), _num(s.step_time_us, us_cell(s.step_time_us)),
               *(_num(s.breakdown_us.get(c, 0.0), us_cell(s.breakdown_us.get(c, 0.0))) for c in cats),
               *((_num(s.gpu_utilization, share_cell(s.gpu_utilization)), Cell(""), Cell("")) if gpu else ())],
              [Cell("share", None, "text"), Cell("100%"),
               *(Cell(share_cell(s.breakdown_us.get(c, 0.0) / total if total else None)) for c in cats),
               *((Cell(""), Cell(""), Cell("")) if gpu else ())]]
    return Table(columns, rows, id="steps", footer=footer, terminal_rows=12)


def gpu_table(report: Report) -> Table | None:
    if report.gpu is None:
        return None
    rows = [[Cell(str(d.device)), _num(d.utilization, share_cell(d.utilization, 1)),
             _num(d.busy_us_per_step, us_cell(d.busy_us_per_step)),
             *(_num(d.idle_us_per_step.get(k), us_cell(d.idle_us_per_step.get(k))) for k in ("host_wait", "kernel_wait",
                                                                                         "other"))]
            for d in report.gpu.devices]
    return Table([("device", ""), ("utilisation", ""), ("busy / step", ""), ("idle: host wait", ""),
                  ("kernel wait", ""), ("other", "")], rows, id="gpu")


def kernels_table(report: Report) -> Table | None:
    k = report.kernels
    if k is None:
        return None
    rows = [[kernel_cell(r.name), _num(r.count, count_cell(r.count)),
             _num(r.total_us, us_cell(r.total_us)),
             _num(r.mean_us, us_cell(r.mean_us)), _num(r.share, share_cell(r.share, 1)),
             Cell("yes" if r.tensor_core else ""), Cell("yes" if r.collective else "")] for r in k.top]
    note = (f"{count_cell(k.count_per_step)} kernels per step ({k.distinct} distinct), "
            f"{us_cell(k.time_us_per_step)} of kernel time per step; "
            f"tensor cores {share_cell(k.tensor_core_share)} of kernel time; "
            f"{share_cell(k.short_kernel_share)} of kernels under {k.short_kernel_threshold_us:g} µs")
    if k.launch_delay_us:
        delay = k.launch_delay_us
        note += f"; launch-to-start delay p50 {us_cell(delay['p50'])}, p90 {us_cell(delay['p90'])}"
    return Table([("kernel", "text name"), ("count", ""), ("total", ""), ("mean", ""), ("share", ""),
                  ("tensor cores", ""), ("collective", "")], rows, title=f"Top {len(k.top)} kernels", id="kernels",
                 note=note, terminal_rows=8)


def sync_tables(report: Report) -> list[Table]:
    sy = report.syncs
    if sy is None:
        return []
    apis = Table([("call", "text"), ("per step", ""), ("time / step", "")],
                 [[Cell(a.api, None, "text mono"), _num(a.count_per_step, count_cell(a.count_per_step)),
                   _num(a.time_us_per_step, us_cell(a.time_us_per_step))] for a in sy.apis],
                 title=f"Sync calls: {count_cell(sy.count_per_step)} per step, {us_cell(sy.time_us_per_step)}",
                 id="sync-apis")
    causes = Table([("op", "text"), ("via", "text"), ("call", "text"), ("where", "text"), ("count", ""), ("time", "")],
                   [[Cell(c.op, None, "text mono"), Cell(c.inner_op, None, "text mono"), Cell(c.api, None, "text mono"),
                     Cell(where(c.location), None, "text mono"), _num(c.count, str(c.count)),
                     _num(c.total_us, us_cell(c.total_us))] for c in sy.causes],
                   title="Where the syncs come from", id="sync-causes", terminal_rows=6)
    return [apis, causes] if sy.causes else [apis]


def copies_table(report: Report) -> Table | None:
    c = report.copies
    if c is None:
        return None
    rows = [[Cell(d.direction, None, "text"), _num(d.count, str(d.count)), _num(d.bytes, bytes_cell(d.bytes)),
             _num(d.total_us, us_cell(d.total_us)),
             _num(d.bandwidth_gb_s, "-" if d.bandwidth_gb_s is None else f"{d.bandwidth_gb_s:,.1f} GB/s"),
             _num(d.pageable_bytes, bytes_cell(d.pageable_bytes) if d.pageable_count else "-"),
             _num(d.pinned_bytes, bytes_cell(d.pinned_bytes) if d.pinned_count else "-")] for d in c.directions]
    return Table([("direction", "text"), ("count", ""), ("bytes", ""), ("time", ""), ("bandwidth", ""),
                  ("pageable", ""), ("pinned", "")], rows, id="copies",
                 title=f"Copies: {count_cell(c.count_per_step)} per step, "
                       f"{bytes_cell(c.htod_bytes_per_step)} host-to-device per step "
                       f"({bytes_cell(c.pageable_htod_bytes_per_step)} from pageable memory)")


def memory_table(report: Report) -> Table | None:
    if not report.memory:
        return None
    rows = [[Cell("host" if m.device < 0 else str(m.device)),
             _num(m.peak_allocated_bytes, bytes_cell(m.peak_allocated_bytes)),
             _num(m.peak_reserved_bytes, bytes_cell(m.peak_reserved_bytes))] for m in report.memory]
    return Table([("device", ""), ("peak allocated", ""), ("peak reserved", "")], rows, id="memory")


def struct_table(rows: list[Any], *, id: str, title: str = "", note: str = "", skip: tuple[str, ...] = (),
                 first: tuple[str, ...] = (), terminal_rows: int | None = None) -> Table | None:
    """A table of any list of report rows: one column per plain field (`first` ones first), formatted by the
    field's name, so sections other analyses add keep rendering as their fields grow."""
    if not rows:
        return None
    data = [msgspec.to_builtins(r) for r in rows]
    keys = [k for k in first if k in data[0]] + [k for k in data[0] if k not in first]
    keys = [k for k in keys if k not in skip and not isinstance(data[0][k], (dict, list))]
    numeric = {k: any(isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool) for d in data)
               for k in keys}
    cells = [[Cell("" if d.get(k) is None else value_text(k, d[k]), d.get(k) if numeric[k] else None,
                   "" if numeric[k] else "text mono") for k in keys] for d in data]
    return Table([(label(k, table=True), "" if numeric[k] else "text") for k in keys], cells, title=title, id=id,
                 note=note, terminal_rows=terminal_rows)


# Per-line and per-module GPU columns: empty on a CPU-only run.
GPU_FIELDS = ("gpu_fwd_us", "gpu_bwd_us", "kernels", "own_gpu_us")


def lines_tables(report: Report) -> list[Table]:
    """Time by user source line, the time no line can take, and the syncs by line (when the trace says)."""
    lines = getattr(report, "lines", None)
    if lines is None:
        return []
    note = (f"From {getattr(lines, 'source', '?')}, by {getattr(lines, 'granularity', 'line')}; "
            f"{share_cell(getattr(lines, 'attributed_share', None))} of the host time of ops found a line. "
            "Times per step.")
    gpu = () if report.accelerator != "none" else GPU_FIELDS  # no GPU columns in a CPU-only report
    tables = [
        struct_table(getattr(lines, "rows", []), id="lines", note=note, skip=("file", "line", *gpu), first=("label",),
                     terminal_rows=15),
        struct_table(getattr(lines, "unattributed", []), id="lines-unattributed", title="Time no line can take",
                     skip=("file", "line", "function", "code", *gpu), terminal_rows=3),
        # A CPU-only run has no GPU to wait for: its scalar reads stay in the JSON, not in its report.
        struct_table(getattr(lines, "syncs", []) if report.accelerator != "none" else [], id="line-syncs",
                     terminal_rows=6, title="Host-device syncs by line"),
    ]
    return [t for t in tables if t is not None]


def modules_table(report: Report) -> Table | None:
    modules = getattr(report, "modules", None)
    return struct_table(getattr(modules, "rows", []), id="modules", terminal_rows=20,
                        skip=() if report.accelerator != "none" else GPU_FIELDS,
                        note=f"From {getattr(modules, 'source', '?')}; times per step, with children (own_*: alone).")


# NVML's energy counter moves in steps of tens of ms: over a shorter window its difference says nothing.
MIN_COUNTED_WINDOW_S = 1.0


def run_summary(report: Report) -> list[str]:
    """How the capture went, in a few lines: what was recorded, on what, at what cost."""
    run = report.run
    if run is None:
        return []
    first = run.first_recorded_step
    span = f"steps {first}-{first + run.steps_recorded - 1}" if first is not None and run.steps_recorded else "no steps"
    lines = [f"command: {' '.join(run.command)}" + (f" (exit code {run.exit_code})" if run.exit_code else ""),
             f"run: {run.status}: {span} ({run.step_source or 'no'} steps, {run.steps_recorded} of "
             f"{run.steps_requested} recorded after {run.skip} skipped and {run.warmup} warm-up)"]
    if run.batch_size:
        lines.append(f"batch size: {run.batch_size} (from the {run.batch_size_source})")
    if getattr(run, "grad_accumulation", None):
        lines.append(f"gradient accumulation: {run.grad_accumulation} backward passes per optimizer step, so "
                     f"{run.samples_per_step or '?'} samples per step")
    if getattr(run, "phase", None) and run.phase != "training":
        lines.append(f"phase: {run.phase}: no backward pass ran in the recorded steps")
    if run.profiler_overhead is not None:
        ref = getattr(run, "reference", None)
        lines.append(f"profiler overhead: {run.profiler_overhead:+.1%} "
                     f"(recorded steps {us_cell(run.recorded_step_us)}, "
                     f"unprofiled {us_cell(run.unprofiled_step_us)}, {ref.method if ref else 'host clock'})")
    tel = run.telemetry
    if tel is not None and tel.cpu_util_mean is not None:
        lines.append(f"CPU busy during the window: {tel.cpu_util_mean:.0f}% mean over "
                     f"{len(tel.cpu_util_per_core or [])} cores")
    sampled = False
    for g in tel.gpu if tel is not None else []:
        parts = [f"GPU {g.index} ({g.name})"]
        if g.util_mean is not None:
            parts.append(f"NVML utilisation {g.util_mean:.0f}% over the window")
            sampled = True
        if g.power_mean_w is not None:
            parts.append(f"{g.power_mean_w:.0f} W")
        energy = next((e for e in run.energy_per_step if e.gpu == g.index), None)
        if energy is not None:
            parts.append(f"~{energy.joules:.3g} J per step (mean power x {energy.basis})")
        window_s = tel.end_s - tel.start_s
        if g.energy_j is not None and window_s >= MIN_COUNTED_WINDOW_S:
            parts.append(f"{g.energy_j:.1f} J counted over the {window_s:.1f} s window")
        lines.append(", ".join(parts))
    if sampled and report.summary.gpu_utilization is not None:
        lines.append(f"NVML utilisation and the report's GPU utilisation ({share_cell(report.summary.gpu_utilization)})"
                     " measure different things: NVML samples whether any kernel ran in each of its periods over the "
                     "whole telemetry window (start-up and unprofiled steps included); the report's is the share of "
                     "the recorded steps in which a kernel ran, from the trace")
    if run.profiled_device == "cpu":
        lines.append("device: no GPU found: profiled the CPU only")
    if run.folder:
        lines.append(f"run folder: {run.folder}" + (f" ({', '.join(run.files)})" if run.files else ""))
    return lines
