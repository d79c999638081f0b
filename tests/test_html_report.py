"""The HTML report without a browser: the timeline it draws, escaping, determinism, sections, size."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import numpy as np
import pytest

from builder import TraceBuilder
from conftest import KINETO, kineto_trace
from stepscope.analysis.facts import compute_facts
from stepscope.analysis.timeline import representative_step, step_timeline
from stepscope.model import report as s
from stepscope.model.telemetry import GpuReading, Sample, TelemetryReport, WindowSummary, telemetry_to_json
from stepscope.pipeline import analyze
from stepscope.report import render
from stepscope.report.tables import struct_table
from stepscope.trace.load import load_traces

EVIL = "<script>alert(1)</script>"
BASE_US = 1_700_000_000_000_000.0  # an epoch-sized origin, as real traces have


def training_trace(path: Path, *, steps: int = 3, evil: str = EVIL, base: float = BASE_US) -> Path:
    """Steps of: DataLoader wait, a Python frame calling a GEMM, a kernel named `evil`, and `.item()` syncing."""
    b = TraceBuilder()
    for i in range(steps):
        t = base + i * 1000.0 + (100.0 if i == 1 else 0.0)  # step 1 is the longest, step 0 the shortest
        b.step(i, t, t + 1000 + (100 if i == 1 else 50 if i == 2 else 0))
        b.dataloader(t, t + 300)
        b.span("python_function", "train.py(42): train_step", t + 300, t + 990)
        b.op("aten::mm", t + 380, t + 420)
        b.launch("volta_sgemm_128x64_nn", (t + 400, t + 410), (t + 420, t + 690))
        b.launch(evil, (t + 600, t + 605), (t + 700, t + 760))
        b.copy("HtoD", (t + 310, t + 320), (t + 320, t + 380), nbytes=4_000_000)
        b.op("aten::item", t + 700, t + 780)
        b.runtime("cudaStreamSynchronize", t + 710, t + 770)
    return b.write(path)


def report_of(path: Path) -> s.Report:
    """The report as the pipeline builds it, timeline included."""
    report = analyze(path)
    assert report.timeline is not None
    return report


WINDOW = WindowSummary(start_s=0.2, end_s=0.6, samples=2, cpu_util_mean=55.0, cpu_util_per_core=[50.0, 60.0])


def telemetry_doc(gpu_name: str) -> TelemetryReport:
    """A run's telemetry.json as capture writes it: five readings, one GPU, the window over two of them."""
    samples = [Sample(t=0.2 * i, cpu=[50.0, 60.0], gpu=[GpuReading(util=90.0, power_w=250.0)]) for i in range(5)]
    return TelemetryReport(interval_s=0.2, cpu_source="/proc/stat", cpu_cores=2, gpus=[gpu_name], notes=[],
                           window=WINDOW, samples=samples)


def with_advice(report: s.Report) -> s.Report:
    """A verdict and a recommendation whose strings come from the trace (as the advice engine's may)."""
    return msgspec.structs.replace(
        report,
        patterns=[s.Pattern(id="sync_bound", share=0.31, title="the host waits on .item()",
                            evidence={"sync_us": 60.0, "kernel": EVIL})],
        recommendations=[s.Recommendation(
            id="remove_item_sync", title="Drop the per-step .item()", evidence={"syncs_per_step": 1},
            location=s.Location(file="train.py", line=42, function="train_step"), estimated_speedup=1.25,
            estimate="step 1.0 ms -> ~0.8 ms")])


def test_representative_step_is_the_median() -> None:
    assert representative_step(np.array([10, 30, 20])) == 2
    assert representative_step(np.array([10, 30, 20, 40])) == 2  # the lower middle
    assert representative_step(np.array([5])) == 0


def test_timeline_of_the_median_step(tmp_path: Path) -> None:
    report = report_of(training_trace(tmp_path / "t.json"))
    tl = report.timeline
    assert tl is not None
    durations = [r.duration_us for r in report.steps]
    assert tl.step_id == report.steps[int(np.argsort(durations)[1])].id
    labels = [r.label for r in tl.rows]
    assert "GPU 0 stream 7" in labels and "GPU 0 idle" in labels
    assert any(r.kind == "runtime" for r in tl.rows)
    sp = tl.spans
    assert len(sp.row) == len(sp.start_us) == len(sp.dur_us) == len(sp.category) == len(sp.name)
    assert all(st >= 0 and st + d <= tl.duration_us + 1e-6 for st, d in zip(sp.start_us, sp.dur_us, strict=True))
    names = {tl.names[n] for n in sp.name}
    assert {EVIL, "volta_sgemm_128x64_nn", "host wait"} <= names
    assert [(y.api, y.op) for y in tl.syncs] == [("cudaStreamSynchronize", "aten::item")]
    assert tl.syncs[0].location == s.Location(file="train.py", line=42, function="train_step", code="")


def test_timeline_keeps_the_longest_spans(tmp_path: Path) -> None:
    facts = compute_facts(load_traces([training_trace(tmp_path / "t.json")])[0])
    args = (facts.trace, facts.steps, facts.gpu, facts.syncs)
    full, small = step_timeline(*args), step_timeline(*args, max_spans=5)
    assert full is not None and small is not None
    assert len(small.spans.row) == 5 and small.left_out == len(full.spans.row) - 5 + full.left_out
    assert min(small.spans.dur_us) >= sorted(full.spans.dur_us)[-5]


def test_page_is_self_contained_escaped_and_deterministic(tmp_path: Path) -> None:
    report = with_advice(report_of(training_trace(tmp_path / "t.json")))
    html = render("html", report)
    assert html == render("html", report)
    text = html.decode()
    assert EVIL not in text  # neither in the markup nor in the script data
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text  # the kernels table shows it as text
    assert not re.search(r"<(script|img|link|iframe)[^>]+(src|href)=", text)  # nothing loaded from elsewhere
    assert "default-src &#39;none&#39;" in text  # the CSP forbids every fetch (the browser test checks it holds)
    assert text.count("<script>") == 2  # plotly and the page script, once each
    for fig in ("fig-breakdown", "fig-gpu", "fig-timeline"):
        assert f'id="{fig}"' in text
    assert "SYNC BOUND" in text and "train.py:42 (train_step)" in text and "~1.25x" in text


def test_sections_appear_only_with_their_data(tmp_path: Path) -> None:
    b = TraceBuilder(device_name=None)
    b.step(1, 0, 100)
    b.op("aten::add", 10, 50)
    report = report_of(b.write(tmp_path / "cpu.json"))
    text = render("html", report).decode()
    assert 'id="verdict"' in text and 'id="breakdown"' in text
    for absent in ('id="gpu"', 'id="kernels"', 'id="copies"', 'id="syncs"', 'id="fig-gpu"'):
        assert absent not in text


def test_rows_of_sections_added_later_become_tables() -> None:
    class LineRow(msgspec.Struct):
        file: str
        line: int
        time_us: float
        share: float

    table = struct_table([LineRow(file=EVIL, line=7, time_us=1500.0, share=0.25)], id="lines")
    assert table is not None
    assert [c for c, _ in table.columns] == ["file", "line", "time", "share"]  # the cells carry the unit
    assert [c.text for c in table.rows[0]] == [EVIL, "7", "1.5 ms", "25.0%"]


def test_lines_section_when_the_trace_has_python_stacks(tmp_path: Path) -> None:
    report = report_of(training_trace(tmp_path / "t.json"))
    if getattr(report, "lines", None) is None:
        pytest.skip("this build attributes no time to source lines")
    text = render("html", report).decode()
    assert 'id="table-lines"' in text and "train.py:42" in text and 'id="table-line-syncs"' in text


def test_cli_writes_html_and_report_re_renders_it(tmp_path: Path) -> None:
    trace = training_trace(tmp_path / "t.json.gz")
    out, saved = tmp_path / "a.html", tmp_path / "run" / "report.json"
    done = subprocess.run([sys.executable, "-m", "stepscope", "analyze", str(trace), "--html", str(out),
                           "--json", str(saved)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"wrote {saved}, {out}"
    assert out.read_bytes().startswith(b"<!doctype html>")
    again = tmp_path / "b.html"
    done = subprocess.run([sys.executable, "-m", "stepscope", "report", str(saved.parent), "--html", str(again)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert again.read_bytes().startswith(b"<!doctype html>")
    done = subprocess.run([sys.executable, "-m", "stepscope", "report", str(trace)], capture_output=True, text=True)
    assert done.returncode == 2 and "run folder" in done.stderr


def test_run_folder_page_has_the_run_and_its_telemetry(tmp_path: Path) -> None:
    run = s.Run(command=["python", "train.py"], status="window recorded", exit_code=0, step_source="optimizer",
                skip=5, warmup=2, steps_requested=3, steps_recorded=3, first_recorded_step=7, batch_size=32,
                batch_size_source="dataloader", profiled_device="cuda", profiler_overhead=0.08,
                unprofiled_step_us=900.0, recorded_step_us=980.0, telemetry=WINDOW)
    report = msgspec.structs.replace(report_of(training_trace(tmp_path / "t.json")), run=run)
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "report.json").write_bytes(s.to_json(report))
    (folder / "telemetry.json").write_bytes(telemetry_to_json(telemetry_doc(EVIL)))
    out = tmp_path / "run.html"
    done = subprocess.run([sys.executable, "-m", "stepscope", "report", str(folder), "--html", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert 'id="fig-run"' in text and "python train.py" in text and "8.0%" in text
    assert EVIL not in text


def test_v100_page_stays_under_10_mb(tmp_path: Path) -> None:
    html = render("html", report_of(kineto_trace("v100_ddp_train_rank1.json.gz")))
    assert len(html) < 10 * 2**20
    figures = json.loads(re.search(rb'id="stepscope-figures">(.*?)</script>', html, re.S).group(1))
    # the trace has no op shapes (no roofline) but allocator samples on device 1 (memory over time)
    assert set(figures) == {"fig-breakdown", "fig-gpu", "fig-timeline", "fig-memory-usage-1"}


@pytest.mark.parametrize("name", ["a100_event_sync_tiny.json.gz", "mi250_rocm_toy_train.json.gz",
                                  "old_categories_inference_rank1.json.gz", "a100_triton_kernel.json.gz",
                                  "two_rank_job"])
def test_html_does_not_crash_on_real_traces(name: str) -> None:
    path = KINETO / name
    if not path.exists():
        pytest.skip(f"shared trace {path} is not available")
    report = report_of(path) if path.is_file() else render_ranks(path)
    assert render("html", report).startswith(b"<!doctype html>")


def render_ranks(path: Path) -> s.Report:
    from stepscope import analyze

    return analyze(path)
