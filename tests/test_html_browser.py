"""The HTML report in a real headless Chromium: no console errors, no network, the verdict visible, the
charts drawn, trace strings shown as text. Skips when Chromium, its driver or selenium is missing, and fails then
under CI (the environment variable CI set)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from conftest import ON_CI, kineto_trace
from stepscope.model.telemetry import GpuReading, Sample, TelemetryReport, WindowSummary
from stepscope.report import render
from test_html_report import EVIL, report_of, training_trace, with_advice

CHROMIUM = os.environ.get("STEPSCOPE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = os.environ.get("STEPSCOPE_CHROMEDRIVER") or shutil.which("chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1400,1000")


def unavailable(why: str) -> NoReturn:
    """A browser test that cannot run skips, except under CI (CI set, as CI services set it): there it fails, so
    that a CI run without its browser tests cannot pass."""
    if ON_CI:
        pytest.fail(f"{why}, and CI is set: CI must run the browser tests", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    try:
        from selenium import webdriver
    except ImportError:
        unavailable("selenium is not installed (scripts/setup-venv test)")
    if not CHROMIUM or not DRIVER:
        unavailable("Chromium or chromedriver is not installed (scripts/install-chromium, or apt-get install "
                    "chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    from selenium.webdriver.chrome.service import Service

    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def open_page(driver, path: Path) -> dict:  # type: ignore[no-untyped-def]
    """Load a page and return what it logged and requested, and whether it raised a dialog."""
    from selenium.common.exceptions import NoAlertPresentException, UnexpectedAlertPresentException

    driver.get("about:blank")
    driver.get_log("browser"), driver.get_log("performance")  # drain what came before this page
    url = path.resolve().as_uri()
    alerted = False
    try:
        driver.get(url)
        driver.execute_async_script("requestAnimationFrame(() => setTimeout(arguments[0], 100))")
    except UnexpectedAlertPresentException:
        alerted = True
    while True:  # dismiss every dialog the page raised
        try:
            driver.switch_to.alert.dismiss()
            alerted = True
        except NoAlertPresentException:
            break
    messages = [json.loads(e["message"])["message"] for e in driver.get_log("performance")]
    requests = [m["params"]["request"]["url"] for m in messages if m["method"] == "Network.requestWillBeSent"
                and m["params"].get("documentURL") == url and m["params"]["request"]["url"] != url]
    return {"console": driver.get_log("browser"), "requests": requests, "alerted": alerted,
            "resources": driver.execute_script("return performance.getEntriesByType('resource').length")}


def screenshot(driver, path: Path) -> Path:  # type: ignore[no-untyped-def]
    height = driver.execute_script("window.scrollTo(0, 0); return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(int(height) + 100, 8000))
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)
    print(f"screenshot: {path}")
    return path


def assert_clean(page: dict) -> None:
    errors = [e for e in page["console"] if e["level"] == "SEVERE"]
    assert errors == [], errors
    assert page["requests"] == [] and page["resources"] == 0
    assert not page["alerted"]


def test_report_page_in_chromium(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    page_path = tmp_path / "report.html"
    telemetry = TelemetryReport(
        interval_s=0.2, cpu_source="/proc/stat", cpu_cores=2, gpus=[EVIL], notes=[],
        window=WindowSummary(start_s=0.4, end_s=0.8, samples=2, cpu_util_mean=50.0, cpu_util_per_core=None),
        samples=[Sample(t=0.2 * i, cpu=[40.0 + i, 60.0], gpu=[GpuReading(util=80.0 + i, power_w=200.0)])
                 for i in range(6)])
    report = with_advice(report_of(training_trace(tmp_path / "t.json")))
    page_path.write_bytes(render("html", report, telemetry=telemetry))
    page = open_page(browser, page_path)
    assert_clean(page)
    verdict = browser.find_element(By.ID, "verdict")
    assert verdict.is_displayed() and "SYNC BOUND" in verdict.text and "train.py:42" in verdict.text
    drawn = browser.execute_script(
        "return [...document.querySelectorAll('.plot')].map(d => [d.id, d.querySelectorAll('svg.main-svg').length,"
        " d.querySelectorAll('.scatterlayer .trace, .barlayer .trace').length])")
    assert {d[0] for d in drawn} == {"fig-breakdown", "fig-gpu", "fig-timeline", "fig-run"}
    assert all(svgs > 0 and traces > 0 for _, svgs, traces in drawn), drawn
    kernels = browser.find_element(By.ID, "table-kernels")
    assert EVIL in kernels.text  # shown as text, not run
    assert browser.execute_script("return document.scripts.length") == 3  # plotly, the data, the page script
    kernels.find_elements(By.TAG_NAME, "th")[2].click()  # sort by total time, largest first
    cells = kernels.find_elements(By.CSS_SELECTOR, "tbody td:nth-child(3)")
    totals = [float(td.get_attribute("data-v")) for td in cells]
    assert totals == sorted(totals, reverse=True)
    screenshot(browser, tmp_path / "report.png")


def test_real_trace_page_in_chromium(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    page_path = tmp_path / "a100_convnet.html"
    page_path.write_bytes(render("html", report_of(kineto_trace("a100_convnet_ddp_rank0.json.gz"))))
    assert_clean(open_page(browser, page_path))
    assert browser.execute_script("return document.querySelectorAll('#fig-timeline svg.main-svg').length") > 0
    screenshot(browser, tmp_path / "a100_convnet.png")


def test_diff_page_in_chromium(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from stepscope.compare import compare
    from stepscope.report.pages import DiffHtmlRenderer

    before = report_of(training_trace(tmp_path / "a.json"))
    after = report_of(training_trace(tmp_path / "b.json", steps=4, evil="fused_kernel"))
    page_path = tmp_path / "diff.html"
    page_path.write_bytes(DiffHtmlRenderer().render(compare(before, after)))
    assert_clean(open_page(browser, page_path))
    assert browser.execute_script("return document.querySelectorAll('#fig-diff-breakdown svg.main-svg').length") > 0
    assert EVIL in browser.execute_script("return document.body.innerText")  # the kernel that disappeared
    screenshot(browser, tmp_path / "diff.png")


def test_tune_page_in_chromium(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from stepscope.report.pages import TuneHtmlRenderer
    from test_tune_report import sample_tune

    page_path = tmp_path / "tune.html"
    page_path.write_bytes(TuneHtmlRenderer(patch_text=f"--- a/train.py\n+{EVIL}\n").render(sample_tune()))
    assert_clean(open_page(browser, page_path))
    bars = browser.execute_script("return document.querySelectorAll('#fig-ladder .barlayer .trace').length")
    assert bars == 4  # measured (baseline, kept, failed: one colour each), and the estimate beside them
    text = browser.execute_script("return document.body.innerText")
    assert "2.50x faster, measured" in text and EVIL in text and "<script>alert(1)</script>" in text
    screenshot(browser, tmp_path / "tune.png")
