"""`%%stepscope` in a real Jupyter kernel, run by nbclient as Jupyter runs a notebook: the profiled cell's first
output is its report, and the same cell run again after a layer is widened shows the diff against its first run.

With STEPSCOPE_SCREENSHOTS=docs/images (and Chromium), the second run's output is drawn as a notebook draws it and
saved as notebook.png."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from test_notebook_magic import LOOP, SETUP  # noqa: E402

WIDEN = "model = Net(32768)  # fc1 4096x wider\nopt = torch.optim.SGD(model.parameters(), lr=0.01)"


def outputs(cell: dict) -> list[dict]:
    return [o for o in cell.outputs if o.output_type == "display_data"]


def test_the_second_run_of_a_cell_shows_the_diff_against_the_first(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the kernel inherits it
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext stepscope\n" + SETUP.replace("HIDDEN", "8")),
                nbformat.v4.new_code_cell(LOOP), nbformat.v4.new_code_cell(WIDEN)]
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    with client.setup_kernel():
        client.execute_cell(nb.cells[0], 0)
        client.execute_cell(nb.cells[1], 1)
        first = outputs(nb.cells[1])
        client.execute_cell(nb.cells[2], 2)
        client.execute_cell(nb.cells[1], 1)  # the profiled cell again: its outputs are replaced
        second = outputs(nb.cells[1])

    assert len(first) == 1 and len(second) == 1
    text1, text2 = first[0].data["text/plain"], second[0].data["text/plain"]
    assert "compared with" not in text1 and "optimizer steps, 3 of 3 recorded" in text1
    # The kernel sends no cell id through nbclient: the run is compared with the last %%stepscope run.
    diff = text2.split("stepscope: run 2;")[0]
    assert diff.startswith("stepscope: run 2, compared with the last %%stepscope run 1")
    assert "x slower" in diff.splitlines()[3], diff  # 67 MFLOP more each way per step
    grown = [line for line in diff.splitlines() if "h = self.fc1(x).relu()" in line]
    assert grown and re.search(r"\+[\d.]+ (µs|ms)\s*$", grown[0]), diff  # the forward line of the wider layer, grown
    assert "<pre" in second[0].data["text/html"] and "compared with" in second[0].data["text/html"]

    shots = os.environ.get("STEPSCOPE_SCREENSHOTS")
    if shots:
        page = tmp_path / "notebook.html"
        page.write_text(notebook_page(nb.cells[1].source, second[0].data["text/html"]))
        screenshot(page, Path(shots) / "notebook.png")


def notebook_page(source: str, output_html: str) -> str:
    """One notebook cell as Jupyter lays it out: the prompt and code, then the output."""
    style = ("body{font-family:sans-serif;margin:16px;background:#fff} .in{display:flex;gap:8px} "
             ".prompt{color:#307fc1;font-family:monospace;min-width:64px;text-align:right;padding-top:6px} "
             ".code{flex:1;background:#f7f7f7;border:1px solid #cfcfcf;padding:6px;font-family:monospace;"
             "white-space:pre;font-size:13px} .out{margin-left:72px}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><style>{style}</style></head><body>"
            f"<div class='in'><div class='prompt'>[4]:</div><div class='code'>{html.escape(source)}</div></div>"
            f"<div class='out'>{output_html}</div></body></html>")


def screenshot(page: Path, out: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from test_html_browser import CHROMIUM, DRIVER, FLAGS

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        driver.get(page.resolve().as_uri())
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1100, min(int(height) + 40, 1250))  # the diff and the verdict
        driver.save_screenshot(str(out))
    finally:
        driver.quit()
