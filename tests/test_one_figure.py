"""One figure, one value: every headline figure of the report model (step time, samples/s and steps/s, GPU
utilisation, MFU, each pattern's share, each breakdown part's share) reads the same in the terminal, on the HTML page
and in the JSON, wherever each shows it (the verdict, the cards, the tables). Each shown figure is read back as a
number and held to the JSON value within the precision it is printed with. GPU runs of an H100 and an H200 and a CPU
trace."""

from __future__ import annotations

import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from conftest import SHARED, kineto_trace
from stepscope.model.report import Report, from_json, to_json
from stepscope.model.telemetry import telemetry_from_json
from stepscope.pipeline import analyze
from stepscope.report import render
from test_html_layout_browser import run_report

DATA = Path(__file__).parent / "data"

CASES = {
    "H100 run, cifar (input bound)": lambda: run_report(DATA / "gpu_h100" / "r4_runs" / "cifar_rung1"),
    "H100 run, launch bound": lambda: run_report(DATA / "gpu_h100" / "launch_bound"),
    "H100 trace, GPT-2 bf16 (MFU)": lambda: analyze(DATA / "gpu_h100_r5" / "gpt2_b12" / "trace_default.json.gz",
                                                    batch_size=12),
    "H200 trace, transformer block": lambda: analyze(DATA / "gpu_h200" / "transformer_block" / "trace.json.gz"),
    "CPU trace, gloo rank": lambda: analyze(DATA / "gloo_ddp" / "dataloader_straggler" / "rank2.json.gz"),
    "shared A100 trace, DDP convnet": lambda: analyze(kineto_trace("a100_convnet_ddp_rank0.json.gz")),
    "shared H100 run report, GPT-2 (report.json)": lambda: saved(SHARED / "traces" / "gpu-h100-turn3" / "gpt2_b12"),
}


def saved(folder: Path) -> Report:
    """A run's report.json as `stepscope run` wrote it on the GPU machine, rendered again (as `stepscope report`)."""
    if not (folder / "report.json").exists():
        pytest.skip(f"shared run folder {folder} is not available")
    return from_json((folder / "report.json").read_bytes())


def number(text: str) -> tuple[float, float]:
    """A figure as printed -> (value in the model's unit, half its last printed digit): '33.0 ms' -> (33000 µs,
    50 µs), '24%' -> (0.24, 0.005), '2,500.00' -> (2500, 0.005)."""
    m = re.fullmatch(r"\s*([-+]?[\d,]+(?:\.(\d+))?)\s*(ms|µs|%)?\s*", text)
    assert m is not None, text
    value = float(m.group(1).replace(",", ""))
    half = 0.5 * 10 ** -len(m.group(2) or "")
    scale = {"ms": 1000.0, "µs": 1.0, "%": 0.01}.get(m.group(3) or "", 1.0)
    return value * scale, half * scale


def same(shown: str, value: float | None, where: str) -> None:
    assert value is not None, where
    got, tolerance = number(shown)
    assert got == pytest.approx(value, abs=tolerance * 1.001 + 1e-12), (where, shown, value)


class Page(HTMLParser):
    """The page's cards (label -> value), verdict text, and tables by id (header, body and footer rows of text)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tables: dict[str, dict[str, list[list[str]]]] = {}
        self.text: list[str] = []
        self._table: str | None = None
        self._part = "body"
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("id") or f"table{len(self.tables)}"
            self.tables[self._table] = {"head": [], "body": [], "foot": []}
        elif tag in ("thead", "tbody", "tfoot") and self._table:
            self._part = {"thead": "head", "tbody": "body", "tfoot": "foot"}[tag]
        elif tag == "tr" and self._table:
            self.tables[self._table][self._part].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table:
            self.tables[self._table][self._part][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        self.text.append(data)


def renderings(report: Report) -> tuple[dict, str, Page]:
    doc = json.loads(to_json(report))
    console = Console(file=io.StringIO(), width=200, record=True, color_system=None)
    console.print(render("terminal", report))
    return doc, console.export_text(), Page(render("html", report).decode())


def terminal_row(text: str, first: str, header: tuple[str, str]) -> dict[str, str]:
    """A terminal table's row as {column: cell}, found by its first cell, under the header that starts with and
    holds the two words of `header`."""
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if line.split()[:1] == [header[0]] and header[1] in line.split())
    head = re.split(r"\s{2,}", lines[top].strip())
    row = next(line for line in lines[top:] if line.split()[:1] == [first])
    return dict(zip(head, re.split(r"\s{2,}", row.strip()), strict=False))


@pytest.mark.parametrize("case", list(CASES))
def test_each_headline_figure_reads_the_same_everywhere(case: str) -> None:
    report = CASES[case]()
    doc, text, page = renderings(report)
    s = doc["summary"]
    html = " ".join(" ".join(page.text).split())
    flat = " ".join(text.replace("│", " ").split())

    # The step's figures: the terminal's verdict panel and the page's cards.
    cards = dict(re.findall(r"(step time|steps/s|samples/s|GPU utilisation|MFU) ([\d,.]+(?: ms| µs|%)?)", html))
    panel = dict(re.findall(r"(step time|steps/s|samples/s|GPU utilisation|MFU) ([\d,.]+(?: ms| µs|%)?)", flat))
    model = {"step time": s["step_time_us"], "steps/s": s["steps_per_s"], "samples/s": s["samples_per_s"],
             "GPU utilisation": s["gpu_utilization"], "MFU": (doc.get("utilization") or {}).get("mfu")}
    for label, value in model.items():
        if value is None:
            assert label not in panel, (label, "shown without a value in the model")
            continue
        same(panel[label], value, f"terminal {label}")
        same(cards[label], value, f"page card {label}")

    # The breakdown table's mean row (terminal and page): the step time, each part, and each part's share.
    if report.steps:
        mean = terminal_row(text, "mean", ("step", "total"))
        shares = terminal_row(text, "share", ("step", "total"))
        steps = page.tables["table-steps"]
        head, foot = steps["head"][0], steps["foot"]
        page_mean, page_share = dict(zip(head, foot[0], strict=True)), dict(zip(head, foot[1], strict=True))
        same(mean["total"], s["step_time_us"], "terminal breakdown mean")
        same(page_mean["total"], s["step_time_us"], "page breakdown mean")
        for label, key in (("kernel", "kernel"), ("DataLoader", "dataloader"), ("CPU ops", "cpu_exec"),
                           ("runtime", "runtime"), ("memcpy", "memcpy"), ("other", "other")):
            if label in page_mean:
                part = s["breakdown_us"][key]
                same(page_mean[label], part, f"page {label}")
                same(page_share[label], part / s["step_time_us"], f"page {label} share")
                if label in mean:
                    same(mean[label], part, f"terminal {label}")
                    same(shares[label], part / s["step_time_us"], f"terminal {label} share")
        if s["gpu_utilization"] is not None:
            same(page_mean["GPU util"], s["gpu_utilization"], "page breakdown GPU util")
            same(mean["GPU util"], s["gpu_utilization"], "terminal breakdown GPU util")

    # The GPU section: one device's utilisation is the report's.
    if doc.get("gpu") and len(doc["gpu"]["devices"]) == 1:
        [device] = doc["gpu"]["devices"]
        row = dict(zip(page.tables["table-gpu"]["head"][0], page.tables["table-gpu"]["body"][0], strict=True))
        same(row["utilisation"], s["gpu_utilization"], "page GPU table")
        terminal = terminal_row(text, "0", ("device", "utilisation"))
        same(terminal["utilisation"], device["utilization"], "terminal GPU table")

    # Each pattern's share: the verdict names the primary one and the others with theirs.
    for i, p in enumerate(doc["patterns"][:3]):
        words = p["id"].replace("_", " ")
        terminal, on_page = (r"costs about ([\d.]+%)",) * 2 if i == 0 else (rf"{words} \(([\d.]+%)\)",
                                                                              rf"also {words} \(([\d.]+%)\)")
        same(found(terminal, flat), p["share"], f"terminal: {words}")
        same(found(on_page, html), p["share"], f"page: {words}")


def found(pattern: str, text: str) -> str:
    m = re.search(pattern, text)
    assert m is not None, (pattern, text[:500])
    return m.group(1)


def test_nvml_and_the_trace_utilisation_are_both_named_with_why() -> None:
    """The run's telemetry and the trace measure GPU busy differently (NVML samples the whole window; the trace covers
    the recorded steps): the page shows both, each named, and says why they differ."""
    folder = DATA / "gpu_h100" / "r4_runs" / "cifar_rung1"
    report = run_report(folder)
    telemetry = telemetry_from_json((folder / "telemetry.json").read_bytes())
    assert report.run is not None and report.run.telemetry is not None
    nvml = report.run.telemetry.gpu[0].util_mean  # the telemetry window's mean, as the capture wrote it
    assert nvml is not None
    assert abs(nvml / 100 - (report.summary.gpu_utilization or 0)) > 0.005  # they differ here: both must be named
    page = Page(render("html", report, telemetry=telemetry).decode())
    html = " ".join(" ".join(page.text).split())
    assert f"NVML utilisation {nvml:.0f}% over the window" in html
    same(found(r"the report's GPU utilisation \(([\d.]+%)\)", html), report.summary.gpu_utilization,
         "the run section names the trace's figure")
    assert "measure different things" in html
