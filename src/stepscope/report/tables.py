"""The HTML pages' tables and evidence lists, formatted from a Report; numbers keep their raw value for sorting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from stepscope.model.report import Report
from stepscope.report.format import count, ms, pct, size
from stepscope.report.palette import BREAKDOWN_COLORS, BREAKDOWN_LABELS


@dataclass(frozen=True)
class Cell:
    text: str
    value: float | None = None  # the raw number, for sorting
    cls: str = ""


@dataclass(frozen=True)
class Table:
    columns: list[tuple[str, str]]  # (label, css class)
    rows: list[list[Cell]]
    title: str = ""
    id: str = ""
    note: str = ""


def evidence_items(evidence: dict[str, Any]) -> list[tuple[str, str]]:
    """Evidence as (label, text) pairs, numbers formatted by what their key says they are; keys sorted, as
    in report.json, so a page made by `analyze` and one made again by `report` are the same."""
    return [(key.replace("_", " "), _value(key, value)) for key, value in sorted(evidence.items())]


def _value(key: str, value: Any) -> str:
    """A value formatted by the unit its key names (`..._us` -> ms, `...bytes` -> size, shares -> %)."""
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value).lower()
    if isinstance(value, (int, float)):
        if key.endswith("_us") or "_us_" in key or key.startswith("us_"):
            return ms(value)
        if key.endswith("bytes"):
            return size(value)
        if "share" in key or "utilization" in key or key.endswith(("_frac", "overhead")):
            return pct(value, 1)
        return count(value) if isinstance(value, int) or abs(value) >= 100 else f"{value:.3g}"
    if isinstance(value, dict):  # inner keys (step ids, op names) say nothing of the unit: the outer key does
        return ", ".join(f"{k}: {_value(f'{key}.{k}', v)}" for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return ", ".join(_value(key, v) for v in value)
    return str(value)


def where(location: dict[str, Any] | None) -> str:
    if not location:
        return ""
    text = f"{location.get('file', '?')}:{location.get('line', '?')}"
    return f"{text} ({location['function']})" if location.get("function") else text


def _num(x: float | None, text: str) -> Cell:
    return Cell(text, x)


def breakdown_table(report: Report) -> Table | None:
    if not report.steps:
        return None
    cats = [c for c in BREAKDOWN_COLORS if any(r.breakdown_us.get(c) for r in report.steps)]
    rows = [[Cell(r.id, None, "text"), _num(r.duration_us, ms(r.duration_us)),
             *(_num(r.breakdown_us.get(c, 0.0), ms(r.breakdown_us.get(c, 0.0))) for c in cats),
             _num(r.gpu_utilization, pct(r.gpu_utilization)), _num(r.sync_count, str(r.sync_count)),
             _num(r.kernel_count, str(r.kernel_count))] for r in report.steps]
    columns = [("step", "text"), ("total", ""), *((BREAKDOWN_LABELS[c], "") for c in cats),
               ("GPU util", ""), ("syncs", ""), ("kernels", "")]
    return Table(columns, rows, id="steps")


def gpu_table(report: Report) -> Table | None:
    if report.gpu is None:
        return None
    rows = [[Cell(str(d.device)), _num(d.utilization, pct(d.utilization, 1)),
             _num(d.busy_us_per_step, ms(d.busy_us_per_step)),
             *(_num(d.idle_us_per_step.get(k), ms(d.idle_us_per_step.get(k))) for k in ("host_wait", "kernel_wait",
                                                                                         "other"))]
            for d in report.gpu.devices]
    return Table([("device", ""), ("utilisation", ""), ("busy / step", ""), ("idle: host wait", ""),
                  ("kernel wait", ""), ("other", "")], rows, id="gpu")


def kernels_table(report: Report) -> Table | None:
    k = report.kernels
    if k is None:
        return None
    rows = [[Cell(r.name, None, "text name mono"), _num(r.count, count(r.count)), _num(r.total_us, ms(r.total_us)),
             _num(r.mean_us, ms(r.mean_us)), _num(r.share, pct(r.share, 1)),
             Cell("yes" if r.tensor_core else ""), Cell("yes" if r.collective else "")] for r in k.top]
    note = (f"{count(k.count_per_step)} kernels per step ({k.distinct} distinct), {ms(k.time_us_per_step)} of kernel "
            f"time per step; tensor cores {pct(k.tensor_core_share)} of kernel time; {pct(k.short_kernel_share)} "
            f"of kernels under {k.short_kernel_threshold_us:g} µs")
    if k.launch_delay_us:
        note += f"; launch-to-start delay p50 {ms(k.launch_delay_us['p50'])}, p90 {ms(k.launch_delay_us['p90'])}"
    return Table([("kernel", "text"), ("count", ""), ("total", ""), ("mean", ""), ("share", ""),
                  ("tensor cores", ""), ("collective", "")], rows, title=f"Top {len(k.top)} kernels", id="kernels",
                 note=note)


def sync_tables(report: Report) -> list[Table]:
    sy = report.syncs
    if sy is None:
        return []
    apis = Table([("call", "text"), ("per step", ""), ("time / step", "")],
                 [[Cell(a.api, None, "text mono"), _num(a.count_per_step, count(a.count_per_step)),
                   _num(a.time_us_per_step, ms(a.time_us_per_step))] for a in sy.apis],
                 title=f"Sync calls: {count(sy.count_per_step)} per step, {ms(sy.time_us_per_step)}", id="sync-apis")
    causes = Table([("op", "text"), ("via", "text"), ("call", "text"), ("where", "text"), ("count", ""), ("time", "")],
                   [[Cell(c.op, None, "text mono"), Cell(c.inner_op, None, "text mono"), Cell(c.api, None, "text mono"),
                     Cell(where(c.location), None, "text mono"), _num(c.count, str(c.count)),
                     _num(c.total_us, ms(c.total_us))] for c in sy.causes],
                   title="Where the syncs come from", id="sync-causes")
    return [apis, causes] if sy.causes else [apis]


def copies_table(report: Report) -> Table | None:
    c = report.copies
    if c is None:
        return None
    rows = [[Cell(d.direction, None, "text"), _num(d.count, str(d.count)), _num(d.bytes, size(d.bytes)),
             _num(d.total_us, ms(d.total_us)),
             _num(d.bandwidth_gb_s, "-" if d.bandwidth_gb_s is None else f"{d.bandwidth_gb_s:,.1f} GB/s"),
             _num(d.pageable_bytes, size(d.pageable_bytes) if d.pageable_count else "-"),
             _num(d.pinned_bytes, size(d.pinned_bytes) if d.pinned_count else "-")] for d in c.directions]
    return Table([("direction", "text"), ("count", ""), ("bytes", ""), ("time", ""), ("bandwidth", ""),
                  ("pageable", ""), ("pinned", "")], rows, id="copies",
                 title=f"Copies: {count(c.count_per_step)} per step, {size(c.htod_bytes_per_step)} host-to-device "
                       f"per step ({size(c.pageable_htod_bytes_per_step)} from pageable memory)")


def memory_table(report: Report) -> Table | None:
    if not report.memory:
        return None
    rows = [[Cell("host" if m.device < 0 else str(m.device)),
             _num(m.peak_allocated_bytes, size(m.peak_allocated_bytes)),
             _num(m.peak_reserved_bytes, size(m.peak_reserved_bytes))] for m in report.memory]
    return Table([("device", ""), ("peak allocated", ""), ("peak reserved", "")], rows, id="memory")


def struct_table(rows: list[Any], *, id: str, title: str = "", note: str = "", skip: tuple[str, ...] = (),
                 first: tuple[str, ...] = ()) -> Table | None:
    """A table of any list of report rows: one column per plain field (`first` ones first), formatted by the
    field's name, so sections other analyses add keep rendering as their fields grow."""
    if not rows:
        return None
    data = [msgspec.to_builtins(r) for r in rows]
    keys = [k for k in first if k in data[0]] + [k for k in data[0] if k not in first]
    keys = [k for k in keys if k not in skip and not isinstance(data[0][k], (dict, list))]
    numeric = {k: any(isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool) for d in data)
               for k in keys}
    cells = [[Cell("" if d.get(k) is None else _value(k, d[k]), d.get(k) if numeric[k] else None,
                   "" if numeric[k] else "text mono") for k in keys] for d in data]
    return Table([(k.replace("_", " "), "" if numeric[k] else "text") for k in keys], cells, title=title, id=id,
                 note=note)


def lines_tables(report: Report) -> list[Table]:
    """Time by user source line, the time no line can take, and the syncs by line (when the trace says)."""
    lines = getattr(report, "lines", None)
    if lines is None:
        return []
    note = (f"From {getattr(lines, 'source', '?')}, by {getattr(lines, 'granularity', 'line')}; "
            f"{pct(getattr(lines, 'attributed_share', None))} of the host time of ops found a line. Times per step.")
    tables = [
        struct_table(getattr(lines, "rows", []), id="lines", note=note, skip=("file", "line"), first=("label",)),
        struct_table(getattr(lines, "unattributed", []), id="lines-unattributed", title="Time no line can take",
                     skip=("file", "line", "function", "code")),
        struct_table(getattr(lines, "syncs", []), id="line-syncs", title="Host-device syncs by line"),
    ]
    return [t for t in tables if t is not None]


def modules_table(report: Report) -> Table | None:
    modules = getattr(report, "modules", None)
    return struct_table(getattr(modules, "rows", []), id="modules",
                        note=f"From {getattr(modules, 'source', '?')}; times per step, with children (own_*: alone).")


def run_items(report: Report) -> list[tuple[str, str]]:
    """How a live capture went (`stepscope run`, the API, callbacks), with the telemetry window's summary."""
    run = getattr(report, "run", None)
    if run is None:
        return []
    data = msgspec.to_builtins(run)
    data["command"] = " ".join(data.get("command") or [])
    telemetry = data.pop("telemetry", None) or {}
    data.pop("files", None)
    return evidence_items(data) + [(f"telemetry: {k}", text) for k, text in evidence_items(telemetry)]
