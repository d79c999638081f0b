"""Plotly figure specs for the HTML pages, built from a Report's own figures: selection and styling only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepscope.model.report import Report, Timeline
from stepscope.model.telemetry import GpuReading, TelemetryReport
from stepscope.model.tune import Tune
from stepscope.report.palette import (
    BREAKDOWN_COLORS,
    BREAKDOWN_LABELS,
    IDLE_COLORS,
    IDLE_LABELS,
    TIMELINE_COLORS,
    TIMELINE_LABELS,
)

if TYPE_CHECKING:
    import plotly.graph_objects as go

Figure = dict[str, Any]

ROW_HEIGHT = 26
# The legend sits above the plot, where no tick label or axis title can run into it (below, rotated labels did).
LEGEND = {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom"}
LAYOUT = {"template": "plotly_white", "margin": {"l": 10, "r": 10, "t": 30, "b": 40}, "legend": LEGEND,
          "font": {"family": "system-ui, sans-serif", "size": 12}}
# A second y axis keeps ticks of its own: plotly's default ('sync', on the first axis' grid) gives $0.07, 32.6 W.
SECOND_AXIS = {"overlaying": "y", "side": "right", "showgrid": False, "tickmode": "auto", "automargin": True}


def plain(text: str) -> str:
    """Text for plotly, which reads a subset of HTML in labels: entities keep trace strings literal."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def new_figure(layout: dict[str, Any]) -> go.Figure:
    """An empty plotly figure. plotly is imported here, on the first chart drawn, so that only the HTML pages load
    it: the terminal and JSON outputs draw no chart (plotly's import and figures were a quarter of the terminal
    report's whole process on a 216k-event trace)."""
    import plotly.graph_objects as go

    return go.Figure(layout=layout)


def _spec(fig: go.Figure) -> Figure:
    return fig.to_plotly_json()


def breakdown_figure(report: Report) -> Figure | None:
    """Stacked bars of each step's breakdown (ms), with the GPU utilisation per step on a second axis."""
    if not report.steps:
        return None
    steps = [f"step {plain(r.id)}" for r in report.steps]
    fig = new_figure({**LAYOUT, "barmode": "stack", "yaxis": {"title": {"text": "ms per step"}},
                      "xaxis": {"type": "category"}, "hovermode": "x unified"})
    for cat, color in BREAKDOWN_COLORS.items():
        values = [r.breakdown_us.get(cat, 0.0) / 1000 for r in report.steps]
        if any(values):
            fig.add_bar(x=steps, y=values, name=BREAKDOWN_LABELS[cat], marker={"color": color},
                        hovertemplate="%{y:.2f} ms")
    utils = [r.gpu_utilization for r in report.steps]
    if any(u is not None for u in utils):
        fig.add_scatter(x=steps, y=[None if u is None else 100 * u for u in utils], name="GPU utilisation",
                        yaxis="y2", mode="lines+markers", line={"color": "#222", "width": 2},
                        hovertemplate="%{y:.0f}%")
        fig.update_layout(yaxis2={**SECOND_AXIS, "title": {"text": "GPU utilisation %"}, "range": [0, 105],
                                  "tickmode": "linear", "tick0": 0, "dtick": 20})
    return _spec(fig)


def gpu_figure(report: Report) -> Figure | None:
    """Per device, a step's time split into busy and the idle causes (ms per step)."""
    if report.gpu is None or not report.gpu.devices:
        return None
    devices = [f"GPU {d.device}" for d in report.gpu.devices]
    fig = new_figure({**LAYOUT, "barmode": "stack", "xaxis": {"title": {"text": "ms per step"}},
                      "yaxis": {"type": "category"}, "height": 160 + 40 * len(devices)})
    for key, color in IDLE_COLORS.items():
        values = [(d.busy_us_per_step if key == "busy" else d.idle_us_per_step.get(key, 0.0)) / 1000
                  for d in report.gpu.devices]
        fig.add_bar(y=devices, x=values, orientation="h", name=IDLE_LABELS[key], marker={"color": color},
                    hovertemplate="%{x:.2f} ms")
    return _spec(fig)


def timeline_figure(timeline: Timeline | None) -> Figure | None:
    """The representative step: one line trace per category (spans as thick segments), syncs as markers."""
    if timeline is None or not timeline.rows:
        return None
    t, spans = timeline, timeline.spans
    names = [plain(n) for n in t.names]
    height = 150 + ROW_HEIGHT * len(t.rows)
    fig = new_figure({
        **LAYOUT, "height": height, "hovermode": "closest", "showlegend": True,
        "xaxis": {"title": {"text": f"µs from the start of step {plain(t.step_id)}"}, "range": [0, t.duration_us]},
        "yaxis": {"tickvals": list(range(len(t.rows))), "ticktext": [plain(r.label) for r in t.rows],
                  "autorange": "reversed", "automargin": True, "zeroline": False},
    })
    for c, category in enumerate(t.categories):
        x: list[float | None] = []
        y: list[int | None] = []
        text: list[str | None] = []
        for i in (i for i, cat in enumerate(spans.category) if cat == c):
            start, dur = spans.start_us[i], spans.dur_us[i]
            label = f"{names[spans.name[i]]}<br>{dur:,.1f} µs at {start:,.1f} µs"
            x += [start, start + dur, None]
            y += [spans.row[i], spans.row[i], None]
            text += [label, label, None]
        if x:
            fig.add_scatter(x=x, y=y, text=text, mode="lines", name=TIMELINE_LABELS.get(category, category),
                            line={"color": TIMELINE_COLORS.get(category, "#888"), "width": ROW_HEIGHT - 10},
                            hoverinfo="text", connectgaps=False)
    if t.syncs:
        fig.add_scatter(
            x=[s.start_us for s in t.syncs], y=[s.row for s in t.syncs], mode="markers", name="sync point",
            marker={"symbol": "x-thin", "size": 14, "line": {"width": 3, "color": "#000"}}, hoverinfo="text",
            text=[_sync_label(s) for s in t.syncs],
        )
    return _spec(fig)


def _sync_label(sync: Any) -> str:
    where = ""
    if sync.location:
        where = f"<br>{plain(sync.location.file)}:{sync.location.line}"
    return f"{plain(sync.api)} ({sync.dur_us:,.1f} µs)<br>in {plain(sync.op)}{where}"


MAX_CORE_LINES = 16  # more cores than this make an unreadable tangle; the run section has their mean


def telemetry_figure(telemetry: TelemetryReport | None) -> Figure | None:
    """A run's telemetry (stepscope.telemetry/1) over time: each GPU's NVML utilisation and power, the CPU cores'
    busy % (one grey line per core, one legend entry for them all), the profiled window shaded."""
    samples = telemetry.samples if telemetry is not None else []
    if not samples:
        return None
    t = [x.t for x in samples]
    fig = new_figure({**LAYOUT, "hovermode": "x unified",
                      "xaxis": {"title": {"text": "seconds since the capture started"}},
                      "yaxis": {"title": {"text": "busy %"}, "range": [0, 105]}})
    names = telemetry.gpus if telemetry is not None else []
    for g in range(max((len(x.gpu) for x in samples), default=0)):
        readings = [x.gpu[g] if g < len(x.gpu) else GpuReading() for x in samples]
        label = plain(f"GPU {g}" + (f" ({names[g]})" if g < len(names) else ""))
        fig.add_scatter(x=t, y=[r.util for r in readings], name=f"{label}: NVML utilisation %", mode="lines",
                        hovertemplate="%{y:.0f}%")
        if any(r.power_w is not None for r in readings):
            fig.add_scatter(x=t, y=[r.power_w for r in readings], name=f"{label}: power (W, right axis)",
                            mode="lines", yaxis="y2", line={"dash": "dot"}, hovertemplate="%{y:.0f} W")
            fig.update_layout(yaxis2={**SECOND_AXIS, "title": {"text": "W"}, "rangemode": "tozero"})
    cores = max((len(x.cpu or []) for x in samples), default=0)
    drawn = min(cores, MAX_CORE_LINES)
    for c in range(drawn):
        fig.add_scatter(x=t, y=[(x.cpu or [None] * cores)[c] for x in samples], mode="lines",
                        name=f"CPU busy %, one grey line per core ({drawn} of {cores})" if drawn < cores
                        else f"CPU busy %, one grey line per core ({cores})",
                        line={"width": 1, "color": "#9aa3b2"}, legendgroup="cpu", showlegend=c == 0,
                        hovertemplate=f"core {c}: %{{y:.0f}}%<extra></extra>")
    window = telemetry.window if telemetry is not None else None
    if window:
        fig.add_vrect(x0=window.start_s, x1=window.end_s, fillcolor="#4c78a8", opacity=0.12, line_width=0,
                      annotation_text="profiled window", annotation_position="top left")
    return _spec(fig)


def breakdown_diff_figure(before: dict[str, float], after: dict[str, float], unit: str = "ms per step") -> Figure:
    """Before and after side by side: grouped bars of the mean breakdown (ms per step, or per sample)."""
    cats = [c for c in BREAKDOWN_COLORS if before.get(c) or after.get(c)]
    fig = new_figure({**LAYOUT, "barmode": "group", "yaxis": {"title": {"text": unit}},
                      "xaxis": {"type": "category"}})
    for label, values, color in (("before", before, "#9ecae9"), ("after", after, "#4c78a8")):
        fig.add_bar(x=[BREAKDOWN_LABELS[c] for c in cats], y=[values.get(c, 0.0) / 1000 for c in cats],
                    name=label, marker={"color": color}, hovertemplate="%{y:.2f} ms")
    return _spec(fig)


def prediction_figure(report: Report) -> Figure | None:
    """Step time per GPU (the origin measured, the targets predicted with their interval) and the cost per million
    samples (else the price per GPU-hour) as markers on a second axis."""
    p = report.prediction
    if p is None or not p.targets:
        return None
    origin = plain(f"{p.origin.name or p.origin.gpu} (measured)")
    names = [plain(t.name or t.gpu) for t in p.targets]
    fig = new_figure({**LAYOUT, "yaxis": {"title": {"text": "ms per step"}}, "xaxis": {"type": "category"},
                      "hovermode": "x unified"})
    # One slot per GPU (offsetgroup): the measured bar and the predicted ones are two legend entries, not two colours
    # under one.
    fig.add_bar(x=[origin], y=[(p.origin.step_time_us or 0) / 1000], name="step time, measured (this trace)",
                marker={"color": "#9aa3b2"}, offsetgroup="step", hovertemplate="%{y:.2f} ms")
    fig.add_bar(x=names, y=[t.step_time_us / 1000 for t in p.targets], name="step time, predicted (bar: its interval)",
                marker={"color": "#4c78a8"}, offsetgroup="step", hovertemplate="%{y:.2f} ms",
                error_y={"type": "data", "symmetric": False,
                         "array": [(t.high_us - t.step_time_us) / 1000 for t in p.targets],
                         "arrayminus": [(t.step_time_us - t.low_us) / 1000 for t in p.targets]})
    per_sample = any(t.cost_per_million_samples is not None for t in p.targets)
    costs = [t.cost_per_million_samples if per_sample else t.price_per_gpu_hour for t in p.targets]
    if any(c is not None for c in costs):
        label = "$ per million samples" if per_sample else "$ per GPU-hour"
        fig.add_scatter(x=names, y=costs, name=f"{label} (right axis)", yaxis="y2", mode="markers",
                        marker={"symbol": "diamond", "size": 12, "color": "#f58518"}, hovertemplate="$%{y:.2f}")
        fig.update_layout(yaxis2={**SECOND_AXIS, "title": {"text": label}, "rangemode": "tozero", "tickprefix": "$",
                                  "tickformat": ",.2f"})
    return _spec(fig)


# A rung's bar by what became of it; each colour is an entry of the legend.
RUNG_COLORS = {"baseline": "#5b6475", "kept": "#2e7d32", "not kept": "#9aa3b5", "failed": "#c62828"}


def ladder_figure(tune: Tune, unit: str) -> Figure | None:
    """Throughput per rung of a tune: the measured bar (coloured by what became of the rung: kept, not kept,
    failed) and beside it the estimate stepscope had made."""
    if tune.baseline is None:
        return None
    per_s = "samples_per_s" if unit == "samples/s" else "steps_per_s"
    labels = ["0 baseline"] + [plain(f"{t.rung} {'+'.join(t.tried)}" + "".join(
        f" {k}={v}" for f in t.tried for k, v in t.params.get(f, {}).items())) for t in tune.trials]
    outcome = ["baseline"] + ["kept" if t.accepted else "failed" if t.status != "measured" else "not kept"
                              for t in tune.trials]
    # A rung's rate as the ladder shows it: in its comparison (the side of its gain) where recorded.
    measured = [getattr(tune.baseline, per_s)] + [t.paired_rate if t.paired_rate is not None else getattr(t, per_s)
                                                  for t in tune.trials]
    estimated = [None] + [getattr(t, f"estimated_{per_s}") for t in tune.trials]
    fig = new_figure({**LAYOUT, "barmode": "group", "yaxis": {"title": {"text": unit}},
                      "xaxis": {"type": "category", "categoryorder": "array", "categoryarray": labels,
                                "title": {"text": "rung: the fix it adds"}, "automargin": True}})
    for kind, color in RUNG_COLORS.items():
        mine = [i for i, o in enumerate(outcome) if o == kind]
        if mine:
            fig.add_bar(x=[labels[i] for i in mine], y=[measured[i] for i in mine], name=f"measured: {kind}",
                        marker={"color": color}, offsetgroup="measured", hovertemplate="%{y:,.1f}")
    if any(e is not None for e in estimated):
        fig.add_bar(x=labels, y=estimated, name="estimated before the rung ran", marker={"color": "#f2b84b"},
                    offsetgroup="estimated", hovertemplate="%{y:,.1f}")
    return _spec(fig)
