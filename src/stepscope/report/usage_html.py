"""What the HTML page's utilization and memory sections are handed: sentences, tables and figures."""

from __future__ import annotations

from typing import Any

from stepscope.model.report import Report
from stepscope.report import usage_tables as ut
from stepscope.report.usage_figures import memory_figure, roofline_figure


def _figure_id(device: int) -> str:
    return f"fig-memory-{'host' if device < 0 else device}"


def usage_figures(report: Report) -> dict[str, Any]:
    figs: dict[str, Any] = {"fig-roofline": roofline_figure(report)}
    for m in report.memory_usage.devices if report.memory_usage else []:
        figs[_figure_id(m.device)] = memory_figure(m)
    return {k: v for k, v in figs.items() if v is not None}


def usage_context(report: Report) -> dict[str, Any]:
    devices = report.memory_usage.devices if report.memory_usage else []
    return {
        "utilization": ut.utilization_items(report),
        "peaks": ut.peaks_table(report),
        "roofline": ut.roofline_table(report),
        "uncovered": ut.uncovered_table(report),
        "memory": [{"figure": _figure_id(m.device), "tables": ut.memory_device_tables(m), "notes": ut.memory_items(m)}
                   for m in devices],
    }
