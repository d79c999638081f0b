"""HTML tables and sentences of the utilization and memory sections."""

from __future__ import annotations

from stepscope.model.report import Report
from stepscope.model.usage import DeviceMemoryUsage
from stepscope.report.tables import Cell, Table, kernel_cell
from stepscope.report.usage_text import (
    class_line,
    coverage_line,
    flop_line,
    headroom_line,
    mfu_lines,
    outside_lines,
    peak_title,
    rate,
)
from stepscope.units import bytes_cell, share_cell, us_cell


def utilization_items(report: Report) -> list[str]:
    u = report.utilization
    if u is None:
        return []
    items = [flop_line(u), *mfu_lines(u)]
    coverage = coverage_line(u)
    if coverage:
        items.append(coverage)
    if u.roofline is not None:
        items += [f"of the covered kernel time, {class_line(c)}" for c in u.roofline.classes]
    return items


def peaks_table(report: Report) -> Table | None:
    u = report.utilization
    if u is None or not u.peaks:
        return None
    rows = [[Cell(p.dtype, None, "text"), Cell(f"{p.tflops:,.1f}", p.tflops),
             Cell(f"{p.achievable_tflops:,.1f}" if p.achievable_tflops else "not measured", p.achievable_tflops),
             Cell(f"{p.source}: {p.document}", None, "text"), Cell(p.url or "", None, "text mono")] for p in u.peaks]
    return Table([("dtype", "text"), ("dense peak TFLOP/s", ""), ("achievable TFLOP/s", ""), ("source", "text"),
                  ("document", "text")], rows, id="peaks", title=f"The peak MFU divides by: the "
                 f"{u.hardware_name or u.device}'s row of the hardware table (docs/hardware.md)")


def roofline_table(report: Report) -> Table | None:
    line = report.utilization.roofline if report.utilization else None
    if line is None or not line.points:
        return None
    rows = [[kernel_cell(p.kernel), Cell(p.op, None, "text mono"), Cell(p.dtype, None, "text"),
             Cell(us_cell(p.time_us_per_step), p.time_us_per_step), Cell(share_cell(p.share, 1), p.share),
             Cell(rate(p.tflops), p.tflops), Cell(f"{p.gb_s:,.0f}", p.gb_s),
             Cell("-" if p.intensity is None else f"{p.intensity:,.2f}", p.intensity), Cell(p.roof, None, "text"),
             Cell(share_cell(p.roof_share), p.roof_share)] for p in line.points]
    note = ("Each op's FLOPs and bytes are shared among its kernels by time. Latency-bound: under 10 µs on "
            "average, too short to reach either roof.")
    if line.left_out:
        note += f" The {line.left_out} kernels with least time are left out."
    return Table([("kernel", "text"), ("op", "text"), ("dtype", "text"), ("time/step", ""), ("share", ""),
                  ("achieved", ""), ("GB/s", ""), ("FLOP/B", ""), ("bound", "text"), ("of roof", "")],
                 rows, id="roofline", title="Kernels against the roofline", note=note)


def uncovered_table(report: Report) -> Table | None:
    u = report.utilization
    if u is None or not u.uncovered:
        return None
    rows = [[Cell(o.op, None, "text mono"), Cell(us_cell(o.us_per_step), o.us_per_step)] for o in u.uncovered]
    return Table([("op", "text"), ("time/step", "")], rows, id="uncovered",
                 title="Uncovered: ops with no formula (their time is not counted as zero FLOPs)")


def memory_device_tables(m: DeviceMemoryUsage) -> list[Table]:
    total = m.peak_allocated_bytes or 1
    rows = [[Cell(c.name, None, "text"), Cell(bytes_cell(c.bytes), c.bytes),
             Cell(share_cell(c.bytes / total, 1), c.bytes / total),
             Cell(c.note, None, "text")] for c in m.categories]
    tables = [Table([("category", "text"), ("bytes", ""), ("share", ""), ("what", "text")], rows,
                    id=f"memory-categories-{m.device}", title=peak_title(m))]
    if m.activation_lines:
        lines = [[Cell(a.label, None, "text mono"), Cell(a.code, None, "text mono"), Cell(a.op, None, "text mono"),
                  Cell(bytes_cell(a.bytes), a.bytes)] for a in m.activation_lines]
        tables.append(Table([("line", "text"), ("code", "text"), ("op", "text"), ("bytes", "")], lines,
                            id=f"activation-lines-{m.device}",
                            title="Forward lines holding the most activation memory at the peak"))
    return tables


def memory_items(m: DeviceMemoryUsage) -> list[str]:
    return [line for line in (*outside_lines(m), headroom_line(m.headroom)) if line]
