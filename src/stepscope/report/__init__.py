"""Renderers: each turns a Report into output and never computes a figure."""

from __future__ import annotations

from typing import Any

from stepscope.model.report import SCHEMA, Report, from_json, to_json


def render(kind: str, report: Report, **options: Any) -> Any:
    """Render with the renderer named `kind` ("terminal" -> a rich renderable; "json", "html", "perfetto" -> bytes)."""
    if kind == "json":
        return to_json(report)
    if kind == "terminal":
        from stepscope.report.terminal import TerminalRenderer

        return TerminalRenderer(**options).render(report)
    if kind == "html":
        from stepscope.report.html import HtmlRenderer

        return HtmlRenderer(**options).render(report)
    if kind == "perfetto":
        from stepscope.report.perfetto import PerfettoRenderer

        return PerfettoRenderer(**options).render(report)
    raise ValueError(f"unknown renderer {kind!r}")


__all__ = ["SCHEMA", "Report", "from_json", "render", "to_json"]
