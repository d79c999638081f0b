"""The pages fit and explain, measured in a real Chromium at 1,280 and 1,600 px from the boxes the browser laid out:
no table hides a column (a table wider than its box would scroll its columns out of sight), no legend overlaps a
chart's plot area, tick labels or axis titles, and every trace that shows in a chart has its legend entry. The
report, tune, diff and predict pages of real H100 runs. Skips when Chromium, its driver or selenium is missing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest

from stepscope.model.report import Report, Run
from stepscope.model.telemetry import telemetry_from_json
from test_html_browser import assert_clean, browser, open_page  # noqa: F401  (browser: a fixture)

# Relative to where the tests run (the repository root in CI), so the pages name their traces as a user would.
DATA = Path(os.path.relpath(Path(__file__).parent / "data"))
H100 = DATA / "gpu_h100"
WIDTHS = (1280, 1600)

# Boxes the browser laid out, per table and per chart. A table's box is its scrolling wrapper; a column is hidden
# when the table is wider than that box (its right part scrolls out of sight).
MEASURE = """
const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const tables = [...document.querySelectorAll('table')].map(t => {
  const w = t.parentElement, section = t.closest('section') || document.body;
  const edge = Math.min(w.getBoundingClientRect().right, section.getBoundingClientRect().right);
  return {id: t.id || (section.id + ' table'), overflow: w.scrollWidth - w.clientWidth, edge: edge,
          heads: [...t.querySelectorAll('th')].map(th => [th.textContent.trim(), box(th)])};
});
const charts = [...document.querySelectorAll('.plot')].map(p => {
  const legend = p.querySelector('.legend');
  const others = [...p.querySelectorAll('.xtick text, .ytick text, .y2tick text, .g-xtitle, .g-ytitle, .g-y2title')]
    .filter(e => e.getBoundingClientRect().width > 0).map(e => [e.textContent, box(e)]);
  const area = p.querySelector('.draglayer .xy .nsewdrag') || p.querySelector('.draglayer .nsewdrag');
  return {id: p.id, legend: legend ? box(legend) : null,
          entries: legend ? legend.querySelectorAll('.traces').length : 0,
          area: area ? box(area) : null, others: others,
          shown: (p.data || []).filter(t => t.showlegend !== false && t.type !== 'heatmap').length};
});
return {tables, charts};
"""


def overlap(a: list[float], b: list[float]) -> float:
    """The area two boxes share (0 when they do not touch)."""
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def check_layout(driver, path: Path, width: int) -> dict:  # type: ignore[no-untyped-def]
    driver.set_window_size(width, 1000)
    assert_clean(open_page(driver, path))
    found = driver.execute_script(MEASURE)
    for t in found["tables"]:
        assert t["overflow"] <= 1, (path.name, width, t["id"], "is wider than its box by", t["overflow"])
        hidden = [name for name, b in t["heads"] if b[2] > t["edge"] + 1]
        assert not hidden, (path.name, width, t["id"], "columns past the edge:", hidden)
    for c in found["charts"]:
        if c["legend"] is None:
            continue
        assert c["entries"] >= c["shown"], (path.name, c["id"], "traces without a legend entry")
        if c["area"] is not None:
            assert overlap(c["legend"], c["area"]) == 0, (path.name, width, c["id"], "legend over the plot")
        clashes = [text for text, b in c["others"] if overlap(c["legend"], b) > 0]
        assert not clashes, (path.name, width, c["id"], "legend over", clashes)
    return found


def run_report(folder: Path) -> Report:
    from stepscope.pipeline import analyze
    from stepscope.trace.kineto import read_kineto

    doc = json.loads((folder / "run.json").read_text())
    run = msgspec.convert({k: v for k, v in doc.items() if k in Run.__struct_fields__ and k != "energy_per_step"}, Run)
    return analyze(read_kineto(folder / "trace.json.gz"), run=run)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The four pages of real runs: a run's report with its telemetry, a tune, a diff (batch 32 -> 128), a
    prediction."""
    from stepscope.compare import compare
    from stepscope.model.tune import tune_from_json
    from stepscope.pipeline import analyze
    from stepscope.predict import PredictRequest
    from stepscope.report import render
    from stepscope.report.pages import DiffHtmlRenderer, TuneHtmlRenderer

    out = tmp_path_factory.mktemp("pages")
    folder = H100 / "r4_runs" / "cifar_rung1"
    before = run_report(folder)
    telemetry = telemetry_from_json((folder / "telemetry.json").read_bytes())
    (out / "report.html").write_bytes(render("html", before, telemetry=telemetry))
    tune = tune_from_json((H100 / "tune_cifar" / "tune.json").read_bytes())
    patch = (H100 / "tune_cifar" / "suggested.patch").read_text()
    (out / "tune.html").write_bytes(TuneHtmlRenderer(patch_text=patch).render(tune))
    after = analyze(H100 / "cifar_rung4" / "trace.json.gz", batch_size=128,
                    predict=PredictRequest(gpus=("h200", "a100-80gb", "l4"), prices={"l4": 0.8}))
    (out / "predict.html").write_bytes(render("html", after))
    (out / "diff.html").write_bytes(DiffHtmlRenderer().render(compare(before, after)))
    return {p.stem: p for p in out.glob("*.html")}


@pytest.mark.parametrize("name", ["report", "tune", "diff", "predict"])
def test_page_fits_at_both_widths(browser, pages: dict[str, Path], name: str) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    for width in WIDTHS:
        found = check_layout(browser, pages[name], width)
        assert found["charts"] and found["tables"], name  # each page draws charts and tables: something was measured
    shots = os.environ.get("STEPSCOPE_SCREENSHOTS")  # docs/images: one screen of each page at 1,280 px
    if shots:
        browser.set_window_size(1280, 900)
        open_page(browser, pages[name])
        if name == "predict":  # the predict page's own section, further down the report
            browser.execute_script("document.getElementById('prediction').scrollIntoView()")
        browser.save_screenshot(str(Path(shots) / f"{name}.png"))
