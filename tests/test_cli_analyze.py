"""`stepscope analyze` end to end: terminal output, --json to a file and to stdout."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from builder import TraceBuilder, worked_example
from conftest import KINETO
from stepscope import analyze
from stepscope.report import render


def _trace(tmp_path: Path) -> Path:
    b = TraceBuilder()
    for i in range(3):
        t = i * 1000.0
        b.step(i, t, t + 1000)
        b.dataloader(t, t + 300)
        b.launch("volta_h884gemm_64x64_nn", (t + 400, t + 410), (t + 420, t + 900))
        b.copy("HtoD", (t + 300, t + 310), (t + 310, t + 400), nbytes=1_000_000)
    return b.write(tmp_path / "trace.json.gz")


def test_terminal_and_json_outputs(tmp_path: Path) -> None:
    path = _trace(tmp_path)
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-m", "stepscope", "analyze", str(path), "--json", str(out),
                           "--width", "120", "--batch-size", "8"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Step-time breakdown" in done.stdout and "A100" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == f"wrote {out}"
    doc = json.loads(out.read_text())
    assert doc["summary"]["step_count"] == 3 and doc["summary"]["samples_per_s"] > 0


def test_json_to_stdout_is_pure_json(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "stepscope", "analyze", str(_trace(tmp_path)), "--json", "-"],
                          capture_output=True, text=True)
    assert done.returncode == 0
    assert json.loads(done.stdout)["schema"] == "stepscope.report/1"


def test_terminal_renderer_does_not_crash_on_any_real_trace() -> None:
    for path in [*sorted(KINETO.glob("*.json.gz")), KINETO / "two_rank_job"]:
        if "mtia" in path.name:
            continue  # large; covered by test_real_traces
        console = Console(file=io.StringIO(), width=100, record=True)
        console.print(render("terminal", analyze(path)))
        text = console.export_text()
        assert "step time" in text, path


def test_terminal_golden_on_worked_example(tmp_path: Path) -> None:
    """A fixed-width rendering of DESIGN.md's worked example: the figures a user reads."""
    b = worked_example(TraceBuilder(device_name=None))
    console = Console(file=io.StringIO(), width=130, record=True)
    console.print(render("terminal", analyze(b.write(tmp_path / "w.json"))))
    text = console.export_text()
    row = next(line for line in text.splitlines() if line.strip().startswith("1 "))
    # DESIGN.md's figures for the one step, its GPU utilisation (15/400), no sync call and one kernel.
    assert row.split() == ["1", "400.0", "µs", "15.0", "µs", "10.0", "µs", "5.00", "µs", "30.0", "µs", "180.0", "µs",
                           "35.0", "µs", "125.0", "µs", "4%", "0", "1"]
