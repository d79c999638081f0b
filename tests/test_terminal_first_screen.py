"""The terminal report opens with the answer: at 80 columns the verdict, the step's time and the top fixes fit the
first 24 lines (one screen), and wrapping never cuts a word of a fix (code in it stays whole)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import msgspec
import pytest
from rich.console import Console

from stepscope.model.report import Report, Run
from stepscope.pipeline import analyze
from stepscope.report import render
from stepscope.report.fit import table
from stepscope.report.tables import Cell, Table
from stepscope.trace.kineto import read_kineto

DATA = Path(__file__).parent / "data"
SCREEN = 24


def text_of(renderable: object, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def run_report(folder: Path) -> Report:
    """A live capture's report as `stepscope run` builds it: the trace and the run section written on the GPU."""
    doc = json.loads((folder / "run.json").read_text())
    run = msgspec.convert({k: v for k, v in doc.items() if k in Run.__struct_fields__ and k != "energy_per_step"}, Run)
    return analyze(read_kineto(folder / "trace.json.gz"), run=run)


def ms(text: str) -> float:
    """'33.0 ms' or '400.0 µs' -> µs."""
    number, unit = text.replace(",", "").split()
    return float(number) * (1000 if unit == "ms" else 1)


CASES = {
    "run: launch bound (H100)": lambda: run_report(DATA / "gpu_h100" / "launch_bound"),
    "run: cifar, input bound (H100)": lambda: run_report(DATA / "gpu_h100" / "r4_runs" / "cifar_rung1"),
    "trace: GPT-2 (H100)": lambda: analyze(DATA / "gpu_h100_r5" / "gpt2_b12" / "trace_default.json.gz"),
    "trace: CPU, gloo rank": lambda: analyze(DATA / "gloo_ddp" / "dataloader_straggler" / "rank2.json.gz"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_answer_is_on_the_first_screen(case: str) -> None:
    report = CASES[case]()
    lines = text_of(render("terminal", report), 80).splitlines()
    assert max(len(line) for line in lines) <= 80
    screen = "\n".join(lines[:SCREEN])
    flat = " ".join(screen.replace("│", " ").split())
    if report.patterns:
        assert report.patterns[0].id.replace("_", " ").upper() in screen
    # The step time, read back as a number, is the report's (to the unit's shown precision).
    shown = re.search(r"step time ([\d,.]+ (?:ms|µs))", flat)
    assert shown is not None, screen
    assert ms(shown.group(1)) == pytest.approx(report.summary.step_time_us, rel=0.01, abs=0.06)
    # The top fixes, each with its id and estimated gain.
    for rec in report.recommendations[:3]:
        assert f"[{rec.id}]" in flat, (rec.id, screen)
        if rec.estimated_speedup:
            assert f"~{rec.estimated_speedup:.2f}x" in flat
    assert not report.recommendations or "Top fixes" in screen


FIX = "Capture the step in a CUDA graph (torch.compile(model, mode='reduce-overhead')) if its shapes are static"


@pytest.mark.parametrize("width", [60, 80, 100])
def test_a_wrapping_column_never_cuts_a_word(width: int) -> None:
    """The fix and its reasoning wrap between words: every word of the fix is whole on some line. At 80 columns a
    five-column table gave the fix 17 columns and printed 'mode='reduce-overhea' / 'd'))'."""
    why = "Launch gaps removed by replaying the step as one graph: step 113 ms -> ~13.1 ms (8.69x)."
    spec = Table([("#", ""), ("fix", "text wrap"), ("est. speed-up", ""), ("where", "text"), ("why", "text wrap")],
                 [[Cell("1"), Cell(FIX, None, "text wrap"), Cell("8.69x", 8.69), Cell("examples/launch.py:58"),
                   Cell(why, None, "text wrap")]])
    lines = text_of(table(spec), width).splitlines()
    assert max(len(line) for line in lines) <= width
    header = next(line for line in lines if "fix" in line)
    for word in [*FIX.split(), *(why.split() if "why" in header else [])]:  # a narrow table may leave `why` out
        assert any(re.search(rf"(^|\s){re.escape(word)}(\s|$)", line) for line in lines), (word, lines)


def test_fixes_in_the_verdict_keep_their_code_whole() -> None:
    report = run_report(DATA / "gpu_h100" / "launch_bound")
    assert any("mode='reduce-overhead'" in r.title for r in report.recommendations)
    for width in (60, 80):
        text = text_of(render("terminal", report), width)
        assert "mode='reduce-overhead'))" in text, text[:2000]


def test_predict_at_80_columns_keeps_the_cost_and_counts_its_sources() -> None:
    """`stepscope predict` prints the prediction section: at 80 columns the cost per million samples stays (the
    bottleneck and busy share are in the statements under the table), and the assumptions and sources are counted
    in one line, not printed (40 lines of citations); report.txt (render_terminal) prints them."""
    from stepscope.predict import PredictRequest
    from stepscope.report.sections import prediction
    from stepscope.report.terminal import render_section, render_terminal

    report = analyze(DATA / "gpu_h100" / "cifar_rung4" / "trace.json.gz", batch_size=128,
                     predict=PredictRequest(gpus=("h200", "a100-80gb", "l4"), prices={"l4": 0.8}))
    section = prediction(report)
    assert section is not None and report.prediction is not None
    text = text_of(render_section(section), 80)
    header = next(line for line in text.splitlines() if line.strip().startswith("GPU"))
    assert "$/M samples" in header and "interval" in header
    l4 = next(line for line in text.splitlines() if line.strip().startswith("l4"))
    # The price given, and per million samples at the 573.3 samples/s shown: 0.80 / (573.3 x 3600) x 1e6 = 0.39.
    assert "573.3" in l4 and "$0.80" in l4 and "$0.39" in l4
    assert "source:" not in text and len(text.splitlines()) < 30
    cited = len(report.prediction.sources)
    assert cited > 5 and f"({len(section.detail)} lines): in the HTML page" in text
    full = io.StringIO()
    render_terminal(report, Console(file=full, width=80, color_system=None))
    assert full.getvalue().count("source: ") == cited
