"""Plotly figures of the utilization and memory sections: the roofline and memory over time."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from stepscope.model.report import Report
from stepscope.model.usage import DeviceMemoryUsage, Roofline
from stepscope.report.figures import LAYOUT, Figure, _spec, new_figure, plain

if TYPE_CHECKING:
    import plotly.graph_objects as go

ROOF_COLORS = {"compute": "#4c78a8", "memory": "#f58518", "latency": "#9d755d", "unknown": "#bab0ac"}
# Each dtype's roof its own colour and dash, so that bf16's and fp32's are told apart (both were solid black).
DTYPE_STYLE = {"fp32": ("#222222", "solid"), "tf32": ("#7b4ea3", "dash"), "bf16": ("#1b7f5f", "dot"),
               "fp16": ("#b5473a", "dashdot"), "fp8": ("#c0397d", "longdash"), "int8": ("#6b6b00", "longdashdot")}


def _roof_lines(fig: go.Figure, line: Roofline, lo: float, hi: float, dtypes: list[str]) -> None:
    """Both roofs per dtype the kernels use: the datasheet's (solid) and the measured achievable (faint)."""
    for label, peaks, bandwidth, opacity in (("datasheet", line.peak_tflops, line.bandwidth_gb_s, 1.0),
                                             ("achievable", line.achievable_tflops, line.achievable_gb_s, 0.45)):
        if not bandwidth:
            continue
        for dtype in dtypes:
            peak = peaks.get(dtype)
            if not peak:
                continue
            ridge = peak * 1e12 / (bandwidth * 1e9)
            xs = [lo, ridge, hi] if lo < ridge < hi else [lo, hi]
            ys = [min(peak, x * bandwidth / 1000) for x in xs]
            color, dash = DTYPE_STYLE.get(dtype, ("#555555", "solid"))
            fig.add_scatter(x=xs, y=ys, mode="lines", name=f"{dtype} roof, {label} ({peak:,.0f} TFLOP/s, "
                            f"{bandwidth:,.0f} GB/s)", opacity=opacity,
                            line={"color": color, "width": 2 if label == "datasheet" else 1.5, "dash": dash},
                            hoverinfo="skip")


def roofline_figure(report: Report) -> Figure | None:
    """Kernels as points (FLOPs per byte, achieved TFLOP/s), sized by time, coloured by the roof they are under;
    both roofs drawn, the datasheet's and the measured achievable one."""
    u = report.utilization
    line = u.roofline if u else None
    points = [p for p in (line.points if line else []) if p.intensity and p.tflops > 0]
    if line is None or not points:
        return None
    xs = [p.intensity for p in points]
    lo, hi = 10 ** math.floor(math.log10(min(xs)) - 0.5), 10 ** math.ceil(math.log10(max(xs)) + 0.5)
    fig = new_figure({**LAYOUT, "xaxis": {"type": "log", "title": {"text": "arithmetic intensity (FLOP/byte)"}},
                      "yaxis": {"type": "log", "title": {"text": "achieved TFLOP/s"}}, "height": 480})
    _roof_lines(fig, line, lo, hi, sorted({p.dtype for p in points}))
    biggest = max(p.time_us_per_step for p in points)
    for roof, color in ROOF_COLORS.items():
        mine = [p for p in points if p.roof == roof]
        if not mine:
            continue
        fig.add_scatter(
            x=[p.intensity for p in mine], y=[p.tflops for p in mine], mode="markers",
            name=f"{roof}-bound kernels (size: time per step)",
            marker={"color": color, "opacity": 0.75, "line": {"width": 1, "color": "#333"},
                    "size": [8 + 32 * math.sqrt(p.time_us_per_step / biggest) for p in mine]},
            text=[plain(f"{p.kernel[:120]}<br>{p.op} ({p.dtype}, {p.kind})") for p in mine],
            customdata=[[p.time_us_per_step / 1000, p.gb_s, 100 * (p.roof_share or 0)] for p in mine],
            hovertemplate="%{text}<br>%{customdata[0]:.3f} ms/step, %{y:.2f} TFLOP/s, %{customdata[1]:.0f} GB/s,"
                          " %{x:.2f} FLOP/B, %{customdata[2]:.0f}% of roof<extra></extra>")
    return _spec(fig)


def memory_figure(m: DeviceMemoryUsage) -> Figure | None:
    """Allocated and reserved memory over the recorded steps, the peak marked."""
    if not m.timeline_ms:
        return None
    gb = 1e9
    fig = new_figure({**LAYOUT, "hovermode": "x unified",
                      "xaxis": {"title": {"text": "ms from the trace's start"}},
                      "yaxis": {"title": {"text": "GB"}, "rangemode": "tozero"}})
    fig.add_scatter(x=m.timeline_ms, y=[a / gb for a in m.timeline_allocated], name="allocated", mode="lines",
                    line={"color": "#4c78a8", "shape": "hv"}, hovertemplate="%{y:.3f} GB")
    if any(r > 0 for r in m.timeline_reserved):
        fig.add_scatter(x=m.timeline_ms, y=[r / gb if r >= 0 else None for r in m.timeline_reserved],
                        name="reserved", mode="lines", line={"color": "#f58518", "shape": "hv", "dash": "dot"},
                        hovertemplate="%{y:.3f} GB")
    peak_at = m.timeline_allocated.index(max(m.timeline_allocated))
    fig.add_scatter(x=[m.timeline_ms[peak_at]], y=[m.peak_allocated_bytes / gb], mode="markers", name="peak",
                    marker={"color": "#e45756", "size": 10, "symbol": "x"}, hovertemplate="peak %{y:.3f} GB")
    return _spec(fig)
