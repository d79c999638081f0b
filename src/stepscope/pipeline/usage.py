"""The report's utilization and memory_usage sections, from the Facts (parts the assembly takes)."""

from __future__ import annotations

from stepscope.analysis.facts import Facts
from stepscope.analysis.headroom import MARGIN, batch_headroom, non_pytorch_bytes
from stepscope.analysis.memory_lines import activation_lines
from stepscope.analysis.memory_usage import DevicePeak
from stepscope.analysis.roofline import Roofline
from stepscope.analysis.utilization import Utilization
from stepscope.model import usage as u
from stepscope.units import report_us as _us

MAX_ROOF_POINTS = 60


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(float(x), digits)


def _roofline(line: Roofline | None, util: Utilization) -> u.Roofline | None:
    if line is None:
        return None
    n = max(util.steps, 1)
    roofs = util.roofs
    points = [
        u.RoofPoint(kernel=p.name, op=p.op, kind=p.kind, dtype=p.dtype, count_per_step=round(p.count / n, 2),
                    time_us_per_step=_us(p.time_ns / n), share=round(p.time_ns / max(line.kernel_ns, 1), 5),
                    tflops=round(p.flop_rate / 1e12, 4), gb_s=round(p.byte_rate / 1e9, 3),
                    intensity=_r(p.intensity), roof=p.roof, roof_share=_r(p.roof_share))
        for p in line.points[:MAX_ROOF_POINTS]
    ]
    return u.Roofline(
        peak_tflops={d: round(v / 1e12, 3) for d, v in (roofs.peak_flops if roofs else {}).items()},
        bandwidth_gb_s=_r(roofs.bandwidth / 1e9 if roofs and roofs.bandwidth else None, 1),
        achievable_tflops={d: round(v / 1e12, 3) for d, v in (roofs.achievable_flops if roofs else {}).items()},
        achievable_gb_s=_r(roofs.achievable_bandwidth / 1e9 if roofs and roofs.achievable_bandwidth else None, 1),
        kernel_us_per_step=_us(line.kernel_ns / n), covered_share=_r(line.covered_ns / line.kernel_ns
                                                                     if line.kernel_ns else None),
        classes=[u.RoofClass(roof=c.roof, share=round(c.share, 4), roof_share=_r(c.roof_share), kind=c.kind)
                 for c in line.classes],
        points=points, left_out=max(len(line.points) - MAX_ROOF_POINTS, 0),
    )


def utilization_section(facts: Facts) -> u.Utilization | None:
    util = facts.utilization
    if util is None:
        return None
    spec = util.spec.spec if util.spec else None
    return u.Utilization(
        device=util.device, hardware_row=spec.id if spec else None, hardware_name=spec.name if spec else None,
        match_note=util.spec.note if util.spec else None, devices=util.devices,
        model_flops_per_step=util.model_flops, forward_flops_per_step=util.forward_flops,
        backward_flops_per_step=util.backward_flops, recompute_flops_per_step=util.recompute_flops,
        flops_by_dtype={d: round(f, 1) for d, f in util.flops_by_dtype.items()},
        achieved_tflops=round(util.achieved_flops_per_s / 1e12, 6), mfu=_r(util.mfu), hfu=_r(util.hfu),
        mfu_of_achievable=_r(util.mfu_of_achievable), why_no_mfu=util.why_no_mfu,
        peaks=[u.PeakRow(dtype=p.dtype, tflops=round(p.flops_per_s / 1e12, 3), source=p.source, document=p.document,
                         url=p.url, achievable_tflops=_r(p.achievable / 1e12 if p.achievable else None, 1),
                         achievable_origin=p.achievable_origin) for p in util.peaks],
        cpu_peak_gflops=_r(util.cpu_peak.flops_per_s / 1e9, 1) if util.cpu_peak else None,
        cpu_peak_how=util.cpu_peak.how if util.cpu_peak else None,
        shapes_recorded=util.shapes_recorded, covered_share=_r(util.covered_share),
        uncovered=[u.UncoveredOp(op=name, us_per_step=_us(ns)) for name, ns in util.uncovered],
        roofline=_roofline(util.roofline, util),
    )


def _device_section(facts: Facts, peak: DevicePeak, batch_size: int | None) -> u.DeviceMemoryUsage:
    trace, census = facts.trace, facts.census
    nvml = (census.nvml_used_max_bytes or {}).get(peak.device) if census and peak.device >= 0 else None
    outside = non_pytorch_bytes(peak, nvml)
    info = next((d for d in trace.meta.devices if d.id == peak.device), None)
    room = batch_headroom(peak, batch_size, info.total_memory_bytes if info else None, outside)
    lines = activation_lines(trace, peak.activation_rows)
    times, allocated, reserved = peak.timeline
    return u.DeviceMemoryUsage(
        device=peak.device, peak_allocated_bytes=peak.peak_allocated, peak_reserved_bytes=peak.peak_reserved,
        reserved_gap_bytes=peak.peak_reserved - peak.peak_allocated if peak.peak_reserved is not None else None,
        phase=peak.phase, peak_step=facts.steps.ids[peak.peak_step] if peak.peak_step >= 0 else None,
        categories=[u.MemoryCategory(name=c.name, bytes=c.bytes, note=c.note) for c in peak.categories],
        outside_count=[u.MemoryCategory(name=c.name, bytes=c.bytes, note=c.note) for c in peak.outside_count],
        counts_from_profiler_start=peak.counts_from_profiler_start, nvml_used_max_bytes=nvml,
        non_pytorch_bytes=outside,
        activation_lines=[u.ActivationLine(file=m.line.file if m.line else None, line=m.line.line if m.line else None,
                                           label=m.line.label if m.line else "(no user line)",
                                           code=m.line.code if m.line else "", op=m.op, bytes=m.bytes)
                          for m in lines],
        headroom=u.BatchHeadroom(batch_size=room.batch_size, max_batch=room.max_batch, fixed_bytes=room.fixed_bytes,
                                 per_sample_bytes=round(room.per_sample_bytes, 1), capacity_bytes=room.capacity_bytes,
                                 fragmentation=round(room.fragmentation, 4), non_pytorch_bytes=room.non_pytorch_bytes,
                                 margin=MARGIN, why_none=room.why_none) if room else None,
        timeline_ms=[round(float(t) / 1e6, 4) for t in times.tolist()],
        timeline_allocated=[int(a) for a in allocated.tolist()],
        timeline_reserved=[int(r) for r in reserved.tolist()],
    )


def memory_section(facts: Facts, batch_size: int | None) -> u.MemoryUsage | None:
    if not facts.memory_peaks:
        return None
    census = facts.census
    has_split = census is not None and bool(census.devices)
    return u.MemoryUsage(devices=[_device_section(facts, p, batch_size) for p in facts.memory_peaks],
                         census=census.path if has_split else None,
                         census_taken=census.taken if has_split else None)
