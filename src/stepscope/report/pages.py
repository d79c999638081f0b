"""The diff's and the tune's HTML pages: each a self-contained file built by `report.html.page`. Kept apart from
their terminal renderers so that `stepscope diff` and `stepscope tune` load jinja2 only for --html."""

from __future__ import annotations

from typing import Any

from stepscope.model.diff import Diff
from stepscope.model.tune import Tune
from stepscope.report import figures
from stepscope.report.diff import config_lines, diff_tables, headline, pattern_lines, verdict
from stepscope.report.html import page
from stepscope.report.tune import headline as tune_headline
from stepscope.report.tune import ladder_table, not_tried_table, unit


def diff_figure(diff: Diff) -> dict[str, Any]:
    """The mean breakdown before and after, side by side."""
    if diff.per_sample:
        return figures.breakdown_diff_figure({c.category: c.before_us_per_sample or 0.0 for c in diff.breakdown},
                                             {c.category: c.after_us_per_sample or 0.0 for c in diff.breakdown},
                                             "ms per sample")
    return figures.breakdown_diff_figure({c.category: c.before_us for c in diff.breakdown},
                                         {c.category: c.after_us for c in diff.breakdown})


class DiffHtmlRenderer:
    """Diff -> one self-contained HTML page (bytes)."""

    def render(self, diff: Diff) -> bytes:
        return page("diff.html.j2", title="stepscope diff", generator=diff.generator or "stepscope",
                    figures={"fig-diff-breakdown": diff_figure(diff)}, diff=diff, verdict=verdict(diff),
                    headline=headline(diff), config=config_lines(diff), patterns=pattern_lines(diff),
                    tables=diff_tables(diff))


class TuneHtmlRenderer:
    """Tune -> one self-contained HTML page (bytes)."""

    def __init__(self, patch_text: str | None = None) -> None:
        self.patch_text = patch_text

    def render(self, tune: Tune) -> bytes:
        figs: dict[str, Any] = {"fig-ladder": figures.ladder_figure(tune, unit(tune))}
        return page("tune.html.j2", title=f"stepscope tune: {' '.join(tune.command[:2])}",
                    generator=tune.generator or "stepscope", figures={k: v for k, v in figs.items() if v},
                    tune=tune, headline=tune_headline(tune), ladder=ladder_table(tune), skipped=not_tried_table(tune),
                    patch_text=self.patch_text)
