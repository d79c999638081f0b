"""The HTML report: one self-contained file (plotly inlined, no network), Jinja2 with autoescape on, data
passed to scripts only through `tojson`; every section appears when its data exists."""

from __future__ import annotations

import base64
import hashlib
import re
from functools import lru_cache
from importlib import resources
from typing import Any

from jinja2 import Environment, FunctionLoader, StrictUndefined
from markupsafe import Markup, escape

from stepscope.model.report import Report
from stepscope.model.telemetry import TelemetryReport
from stepscope.report import sections
from stepscope.report import tables as t
from stepscope.report.evidence import evidence_items
from stepscope.units import bytes_cell, count_cell, share_cell, us_cell


def _template_source(name: str) -> str:
    return resources.files("stepscope.report").joinpath("templates", name).read_text(encoding="utf-8")


# Where a long path, call or kernel name may wrap in a narrow column: after / . ( , = _ \ and ::, boundaries of its
# syntax.
BREAK_AFTER = re.compile(r"(?<=[/.(,=_\\])(?=\S)|(?<=::)(?=\S)")
LONG_WORD = 16  # shorter words ('aten::to') stay whole
MARKUP = re.compile(r"<[A-Za-z/!?]")  # a word that reads like markup is shown exactly as the trace wrote it


def breakable(text: object) -> Markup:
    """Text escaped, with <wbr> after path separators, dots, commas, brackets and underscores in its long words: a
    table column can be as narrow as the longest part between them, so columns fit the page rather than hide off
    its edge."""
    out = []
    for word in re.split(r"(\s+)", str(text)):
        if len(word) < LONG_WORD or MARKUP.search(word):
            out.append(str(escape(word)))
        else:
            out.append("<wbr>".join(str(escape(part)) for part in BREAK_AFTER.split(word)))
    return Markup("".join(out))


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=FunctionLoader(_template_source), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "allow_nan": False}
    env.filters.update(us_cell=us_cell, share_cell=share_cell, bytes_cell=bytes_cell, count_cell=count_cell,
                       label=lambda s: str(s).replace("_", " "), breakable=breakable)
    return env


@lru_cache(maxsize=1)
def _scripts() -> tuple[str, str]:
    import plotly.offline

    plotly_js = plotly.offline.get_plotlyjs().replace("</script", "<\\/script")
    return plotly_js, _template_source("app.js")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def page(template: str, *, title: str, generator: str, figures: dict[str, Any], **context: Any) -> bytes:
    """Render a page with plotly and the page script inlined once; the CSP lets only those two scripts run
    and forbids every fetch, so the file works offline and injected markup cannot execute."""
    plotly_js, app_js = _scripts()
    csp = (f"default-src 'none'; script-src {_sha256(plotly_js)} {_sha256(app_js)}; "
           "style-src 'unsafe-inline'; img-src data: blob:; font-src data:")
    html = environment().get_template(template).render(
        title=title, generator=generator, csp=csp, figures=figures,
        plotly_js=Markup(plotly_js), app_js=Markup(app_js), **context,  # trusted: shipped with stepscope
    )
    return html.encode("utf-8")


class HtmlRenderer:
    """Report -> one self-contained HTML page (bytes): the verdict, then every section of report.sections."""

    def __init__(self, title: str | None = None, telemetry: TelemetryReport | None = None) -> None:
        self.title = title
        self.telemetry = telemetry  # a run's telemetry.json (stepscope.telemetry/1), when there is one

    def render(self, report: Report) -> bytes:
        built = sections.build(report, self.telemetry, charts=True)
        return page(
            "report.html.j2",
            title=self.title or f"stepscope: {', '.join(report.source.paths[:2])}",
            generator=report.generator or "stepscope",
            figures={f"fig-{x.id}": x.figure for x in built if x.figure is not None},
            report=report,
            evidence=evidence_items,
            where=t.where,
            cards=sections.headline(report),
            sections=[x for x in built if x.id != "recommendations"],
            recommendations=next((x for x in built if x.id == "recommendations"), None),
        )
