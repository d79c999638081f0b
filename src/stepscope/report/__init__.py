"""Renderers: each turns a Report (or a Diff, a Tune) into output; none computes a figure from a trace (the only
arithmetic: a share or ratio of two figures the Report holds, docs/architecture.md)."""

from __future__ import annotations

import importlib
from typing import Any

from stepscope.model.report import SCHEMA, Report, from_json, to_json

# Each renderer's module, loaded when its output is asked for: the HTML pages bring jinja2, Perfetto's its trace
# writer, the terminal's the report's sections; `stepscope report --json` needs none of them.
RENDERERS: dict[str, tuple[str, str]] = {
    "terminal": ("stepscope.report.terminal", "TerminalRenderer"),
    "html": ("stepscope.report.html", "HtmlRenderer"),
    "perfetto": ("stepscope.report.perfetto", "PerfettoRenderer"),
    "diff-html": ("stepscope.report.pages", "DiffHtmlRenderer"),
    "tune-html": ("stepscope.report.pages", "TuneHtmlRenderer"),
}


def render(kind: str, subject: Any, **options: Any) -> Any:
    """Render `subject` with the renderer named `kind`: "terminal" -> a rich renderable; "json", "html",
    "perfetto" -> bytes, for a Report; "diff-html" for a Diff and "tune-html" for a Tune -> bytes."""
    if kind == "json":
        return to_json(subject)
    if kind not in RENDERERS:
        raise ValueError(f"unknown renderer {kind!r}")
    module, name = RENDERERS[kind]
    return getattr(importlib.import_module(module), name)(**options).render(subject)


__all__ = ["RENDERERS", "SCHEMA", "Report", "from_json", "render", "to_json"]
