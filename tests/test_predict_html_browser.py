"""The prediction section in a real browser: the chart of step time and cost per GPU is drawn, the page stays
clean (no errors, no requests). Skips when Chromium, its driver or selenium is missing."""

from __future__ import annotations

from pathlib import Path

from stepscope.pipeline import analyze
from stepscope.predict import PredictRequest
from stepscope.report import render
from test_html_browser import assert_clean, browser, open_page, screenshot  # noqa: F401  (browser: a fixture)

DATA = Path(__file__).parent / "data"


def test_prediction_chart_in_chromium(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    report = analyze(DATA / "gpu_h100" / "cifar_rung4" / "trace.json.gz", batch_size=128,
                     predict=PredictRequest(gpus=("h200", "a100-80gb", "l4"), prices={"l4": 0.8}))
    page_path = tmp_path / "prediction.html"
    page_path.write_bytes(render("html", report))
    assert_clean(open_page(browser, page_path))
    drawn = browser.execute_script(
        "const d = document.getElementById('fig-prediction');"
        "return [d.querySelectorAll('svg.main-svg').length, d.querySelectorAll('.barlayer .point').length,"
        " d.querySelectorAll('.scatterlayer .point').length]")
    # 4 bars (the origin and three targets), a cost marker for each priced target (h200 from the table, l4 --price)
    assert drawn[0] > 0 and drawn[1] == 4 and drawn[2] == 2, drawn
    assert "NVIDIA L4" in browser.execute_script("return document.getElementById('prediction').innerText")
    screenshot(browser, tmp_path / "prediction.png")
