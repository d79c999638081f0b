"""Sentences of the utilization and memory sections, shared by the terminal and HTML renderers."""

from __future__ import annotations

from stepscope.model.usage import BatchHeadroom, DeviceMemoryUsage, RoofClass, Utilization
from stepscope.units import bytes_cell, share_cell

KIND_WORDS = {"matmul": "matrix-product", "conv": "convolution", "attention": "attention",
              "elementwise": "elementwise", "reduction": "reduction", "norm": "normalisation/softmax", "copy": "copy"}


def flops(x: float | None) -> str:
    """FLOPs with an SI prefix: 6.60 TFLOP."""
    if x is None:
        return "-"
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:,.0f} FLOP"


def rate(tflops: float | None) -> str:
    if tflops is None:
        return "-"
    return f"{tflops:,.1f} TFLOP/s" if tflops >= 1 else f"{tflops * 1000:,.2f} GFLOP/s"


def flop_line(u: Utilization) -> str:
    if not u.shapes_recorded:
        return "FLOPs: not counted: the trace has no op input shapes (record_shapes=True; stepscope run records them)"
    text = (f"model FLOPs per step: {flops(u.model_flops_per_step)} (forward {flops(u.forward_flops_per_step)}, "
            f"backward {flops(u.backward_flops_per_step)})")
    if u.recompute_flops_per_step:
        text += f"; recomputed in the backward: {flops(u.recompute_flops_per_step)}"
    return text + f"; achieved {rate(u.achieved_tflops)} per device"


def mfu_lines(u: Utilization) -> list[str]:
    """The MFU with the peak and its source beside it; HFU, the achievable ratio, or why there is none."""
    if not u.shapes_recorded:
        return []
    if u.mfu is None:
        return [f"MFU: not computed: {u.why_no_mfu}" if u.why_no_mfu else "MFU: not computed"]
    if u.cpu_peak_gflops is not None and not u.peaks:
        return [f"MFU {share_cell(u.mfu, 1)} against an estimated CPU peak of {u.cpu_peak_gflops:,.1f} GFLOP/s "
                f"(estimate: {u.cpu_peak_how})"]
    dev = u.hardware_name or u.device
    peaks = ", ".join(f"{p.dtype} {p.tflops:,.1f} TFLOP/s [{p.source}: {p.document}]" for p in u.peaks)
    lines = [f"MFU {share_cell(u.mfu, 1)} of the {dev}'s dense peak ({peaks})"
             + (f" x {u.devices} devices" if u.devices > 1 else "")]
    if u.hfu is not None:
        lines.append(f"HFU {share_cell(u.hfu, 1)} (with the recomputed forward work)")
    measured = [p for p in u.peaks if p.achievable_tflops]
    if u.mfu_of_achievable is not None and measured:
        lines.append(f"{share_cell(u.mfu_of_achievable, 1)} of what this device achieves "
                     f"({', '.join(f'{p.dtype} {p.achievable_tflops:,.1f} TFLOP/s' for p in measured)}, measured)")
    elif u.peaks:
        lines.append("the peak is the datasheet's: no achievable rate was measured on this device "
                     "(python -m stepscope.hardware.measure)")
    if u.match_note:
        lines.append(u.match_note)
    return lines


def class_line(c: RoofClass) -> str:
    """'56% of covered kernel time is compute-bound matrix-product work at 69% of its roof'."""
    work = KIND_WORDS.get(c.kind, c.kind)
    if c.roof == "latency":
        return f"{share_cell(c.share)} is latency-bound (kernels under 10 µs: launch-bound), mostly {work}"
    if c.roof == "unknown":
        return f"{share_cell(c.share)} has no roof for its dtype on this device ({work})"
    roof = "of the compute peak" if c.roof == "compute" else "of memory bandwidth"
    at = f" at {share_cell(c.roof_share)} {roof}" if c.roof_share is not None else ""
    return f"{share_cell(c.share)} is {c.roof}-bound {work} work{at}"


def coverage_line(u: Utilization) -> str | None:
    if u.covered_share is None or not u.shapes_recorded:
        return None
    what = "kernel time" if u.roofline is not None else "op time"
    text = f"the FLOP formulas cover {share_cell(u.covered_share, 1)} of {what}"
    if u.uncovered:
        shown = ", ".join(f"{o.op} {o.us_per_step / 1000:,.2f} ms" for o in u.uncovered[:4])
        text += f"; uncovered (no formula, not counted as zero) per step: {shown}"
    return text


def peak_title(m: DeviceMemoryUsage) -> str:
    where = "host memory" if m.device < 0 else f"device {m.device}"
    step = f" of step {m.peak_step}" if m.peak_step is not None else ""
    phase = {"optimizer": "optimizer step and after"}.get(m.phase, m.phase)
    text = f"Memory at the peak ({where}): {bytes_cell(m.peak_allocated_bytes)} allocated in the {phase}{step}"
    if m.peak_reserved_bytes is not None:
        text += (f"; {bytes_cell(m.peak_reserved_bytes)} reserved "
                 f"({bytes_cell(m.reserved_gap_bytes)} cached by the allocator)")
    return text


def outside_lines(m: DeviceMemoryUsage) -> list[str]:
    lines = []
    if m.counts_from_profiler_start:
        lines.append("the CPU allocator counts only what was allocated while profiling")
    for c in m.outside_count:
        lines.append(f"{c.name}: {bytes_cell(c.bytes)} held but not in the allocator's count at the peak")
    if m.non_pytorch_bytes is not None:
        lines.append(f"outside PyTorch (NVML used {bytes_cell(m.nvml_used_max_bytes)} - reserved): "
                     f"{bytes_cell(m.non_pytorch_bytes)}")
    return lines


def headroom_line(h: BatchHeadroom | None) -> str | None:
    if h is None:
        return None
    basis = (f"fixed {bytes_cell(h.fixed_bytes)} + {bytes_cell(h.per_sample_bytes)} per sample, allocator overhead "
             f"x{h.fragmentation:.2f}, {share_cell(h.margin)} margin")
    if h.max_batch is None or h.why_none:
        return f"batch headroom (estimate): {h.why_none} ({basis})"
    return (f"batch headroom (estimate): the largest batch that fits is about {h.max_batch} "
            f"(now {h.batch_size}; {basis})")


def short(name: str, width: int = 60) -> str:
    """A kernel's name cut to a width for tables (the HTML keeps the whole name in the hover)."""
    return name if len(name) <= width else name[: width - 1] + "…"
