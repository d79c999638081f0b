"""`stepscope watch --page` in a real headless Chromium: the page updates after a file write without a reload,
names from the trace are shown as text, and the batch control's prediction and its measurement both appear (the
measured peak memory near the predicted one). Skips when Chromium, its driver or selenium is missing."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from live_scripts import ENV, FORWARD_LINE, WIDE, alive, descendants, wait_for, write_script
from test_html_browser import browser  # noqa: F401 - the fixture: headless Chromium, skipped without it

psutil = pytest.importorskip("psutil")
EVIL = "<img src=x onerror=alert(1)>"
BATCH = 64  # measured: 4x the script's batch of 16


def start_watch(folder: Path) -> tuple[subprocess.Popen[str], str, list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", "watch", "--page", "--polling", "--runs-dir", "runs",
                             "--batch-flag=--batch-size", "train.py", "--batch-size", "16"],
                            cwd=folder, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: list[str] = []
    threading.Thread(target=lambda: out.extend(proc.stdout or []), daemon=True).start()
    found = wait_for(lambda: re.search(r"live page at (http://127\.0\.0\.1:\d+/)", "".join(out)), 30, "the page URL")
    return proc, found.group(1), out  # type: ignore[union-attr]


def js(driver, script: str):  # type: ignore[no-untyped-def]
    return driver.execute_script(script)


def test_the_live_page_updates_and_measures_a_batch(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    script = write_script(tmp_path)
    proc, url, out = start_watch(tmp_path)
    try:
        browser.get(url)
        wait_for(lambda: js(browser, "return document.getElementById('step').dataset.run") == "1", 90,
                 "the first run on the page")
        js(browser, "window.__still_here = 42")  # gone if the page reloads
        script.write_text(WIDE.replace("out = model(x)", f"out = model(x)  # {EVIL}"))
        wait_for(lambda: js(browser, "return document.getElementById('step').dataset.run") == "2", 90,
                 "the second run on the page")
        assert js(browser, "return window.__still_here") == 42
        row = js(browser, f"return document.querySelector('tr[data-line=\"train.py:{FORWARD_LINE}\"]').innerText")
        assert EVIL in row and "slower" in row, row  # the line's code as text, its forward time beyond noise
        assert js(browser, "return document.querySelectorAll('#lines img').length") == 0

        field = browser.find_element("id", "batch-input")
        field.clear()
        field.send_keys(str(BATCH))
        predicted = wait_for(lambda: js(browser, "return document.getElementById('batch-prediction').textContent")
                             .startswith(f"predicted at batch {BATCH}:"), 10, "the prediction")
        assert predicted
        browser.find_element("id", "measure").click()
        cell = f"return (document.querySelector('tr[data-batch=\"{BATCH}\"] .measured-step') || {{}}).textContent"
        wait_for(lambda: re.fullmatch(r"[\d.,]+ (ms|µs)", js(browser, cell) or ""), 120, "the measurement")
        cells = js(browser, f"return [...document.querySelectorAll('tr[data-batch=\"{BATCH}\"] td')]"
                            ".map((td) => td.textContent)")
        predicted_peak, measured_peak = _bytes(cells[3]), _bytes(cells[6])
        # Activations grow with the batch: the memory model's peak at 4x the batch is the measured one, near enough.
        assert measured_peak == pytest.approx(predicted_peak, rel=0.1), cells
        if images := os.environ.get("STEPSCOPE_DOCS_IMAGES"):  # docs/watch.md's picture
            browser.set_window_size(1400, 1500)
            browser.save_screenshot(str(Path(images) / "watch-page.png"))
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        everything = alive(descendants(proc.pid))
        proc.send_signal(signal.SIGTERM)  # as Ctrl-C (the terminal test's), with nothing left behind
        proc.wait(30)
    assert proc.returncode == 0, "".join(out)
    assert not alive(everything)


def _bytes(text: str) -> float:
    value, unit = text.split()[:2]
    return float(value.replace(",", "")) * {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}[unit]
