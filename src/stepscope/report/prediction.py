"""The prediction section's contents: one neutral table (origin first, then each target) and a few statements (its
chart is figures.prediction_figure); report/sections.py assembles them. Selection and formatting only."""

from __future__ import annotations

from typing import Any

from stepscope.model.report import Prediction, Report
from stepscope.report.tables import Cell, Table
from stepscope.units import share_cell, us_cell

TITLE = "This job on other GPUs (predicted)"
INTRO = ("Each GPU kernel scaled by the roof that bounds it, the steps replayed with the host as measured; "
         "the interval comes from the model's measured error (docs/predict.md). Energy and cost are estimates.")


def _money(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"${x:,.{digits}f}"


def _joules(x: float | None) -> str:
    return "-" if x is None else f"{x:,.2f}"


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _words(pattern: str | None, none: str = "-") -> str:
    """A pattern id as words: 'gpu_compute_bound' -> 'gpu compute bound'."""
    return pattern.replace("_", " ") if pattern else none


def _marked(targets: list[Any], flag: str) -> str:
    return ", ".join(t.gpu for t in targets if getattr(t, flag)) or "-"


def _fastest_and_cheapest(p: Prediction) -> str:
    """Of the targets; beside the origin when even the fastest is slower; why none is cheapest."""
    fastest = [t for t in p.targets if t.fastest]
    text = f"fastest of the targets: {_marked(p.targets, 'fastest')}"
    origin = p.origin.step_time_us
    if fastest and origin and min(t.step_time_us for t in fastest) > origin:
        text += f" (slower than the origin, {p.origin.gpu}, at {us_cell(origin)} a step)"
    unpriced = [t.gpu for t in p.targets if t.cost_per_million_samples is None]
    cheapest = _marked(p.targets, "cheapest")
    if unpriced and len(unpriced) == len(p.targets):
        return f"{text}; cheapest: - (no price or no batch size for any target)"
    return f"{text}; cheapest: {cheapest}" + (f" (no cost for {', '.join(unpriced)})" if unpriced else "")


def _range(low: float, high: float) -> str:
    """'38.4-38.7 ms': both ends in the unit of the higher one."""
    if high >= 1000:
        digits = 0 if high >= 100_000 else 1
        return f"{low / 1000:,.{digits}f}-{high / 1000:,.{digits}f} ms"
    return f"{low:,.1f}-{high:,.1f} µs"


def prediction_table(report: Report) -> Table | None:
    """Origin first (measured), then each target; GPUs by the hardware table's id (the statements name them)."""
    p = report.prediction
    if p is None:
        return None
    o = p.origin
    epoch = any(t.cost_per_epoch is not None for t in p.targets)
    rows = [[Cell(o.gpu, None, "text"), Cell(us_cell(o.step_time_us), o.step_time_us), Cell("measured"),
             Cell(_rate(o.samples_per_s), o.samples_per_s), Cell(_words(o.bottleneck), None, "text"),
             Cell(share_cell(o.gpu_utilization), o.gpu_utilization), Cell("-"), Cell("-"),
             *([Cell("-")] if epoch else []),
             Cell(_joules(o.energy_j_per_step), o.energy_j_per_step)]]
    for t in p.targets:
        rows.append([
            Cell(t.gpu, None, "text"), Cell(us_cell(t.step_time_us), t.step_time_us),
            Cell(_range(t.low_us, t.high_us), t.low_us),
            Cell(_rate(t.samples_per_s), t.samples_per_s), Cell(_words(t.bottleneck), None, "text"),
            Cell(share_cell(t.gpu_utilization), t.gpu_utilization),
            Cell(_money(t.price_per_gpu_hour), t.price_per_gpu_hour),
            Cell(_money(t.cost_per_million_samples), t.cost_per_million_samples),
            *([Cell(_money(t.cost_per_epoch), t.cost_per_epoch)] if epoch else []),
            Cell(_joules(t.energy_j_per_step), t.energy_j_per_step),
        ])
    columns = [("GPU", "text"), ("step", ""), ("interval", ""), ("samples/s", ""), ("bottleneck", "text"),
               ("busy", ""), ("$/GPU-h", ""), ("$/M samples", ""), *([("$/epoch", "")] if epoch else []),
               ("J/step", "")]
    # A narrow terminal keeps the cost: the bottleneck and busy share are said in the statements below the table.
    return Table(columns, rows, id="prediction", drop_first=("bottleneck", "busy", "J/step", "$/GPU-h", "$/epoch"))


def prediction_lines(report: Report, detail: bool = False) -> list[str]:
    """What the table means in words: each target's bottleneck, then warnings; with `detail`, the assumptions,
    the model and the sources (prediction_detail)."""
    p = report.prediction
    if p is None:
        return []
    lines = [_fastest_and_cheapest(p)]
    lines += [_statement(p, t) for t in p.targets]
    lines += [f"warning: {w}" for w in p.warnings]
    return lines + (prediction_detail(report) if detail else [])


def prediction_detail(report: Report) -> list[str]:
    """Each target's assumptions, the model and the sources it cites."""
    p = report.prediction
    if p is None:
        return []
    lines = [f"{t.name or t.gpu}: {a}" for t in p.targets for a in t.assumptions]
    lines.append(f"model: {p.model}")
    return lines + [f"source: {s}" for s in p.sources]


def _statement(p: Prediction, t: Any) -> str:
    busy = (f": the GPU would be busy {share_cell(t.gpu_utilization)} of the step"
            if t.gpu_utilization is not None else "")
    same = ("as on the origin" if t.bottleneck == p.origin.bottleneck
            else f"on the origin {_words(p.origin.bottleneck, 'without a clear bottleneck')}")
    return (f"on the {t.name or t.gpu} this job would be {_words(t.bottleneck, 'without a clear bottleneck')} ({same})"
            f"{busy}; step {us_cell(t.step_time_us)} ({us_cell(t.low_us)} - {us_cell(t.high_us)})")
