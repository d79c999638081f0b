"""`analyze --perfetto`: the original events kept as they were, plus stepscope's tracks lined up with them."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import KINETO, kineto_trace
from stepscope.analysis.facts import compute_facts
from stepscope.pipeline import analyze
from stepscope.report import render
from stepscope.trace.files import read_bytes
from stepscope.trace.load import load_traces
from test_html_report import BASE_US, training_trace


def annotate(path: Path, out: Path) -> tuple[list[dict], list[dict], int]:
    """Run the CLI; return the original events, stepscope's events, and stepscope's pid."""
    done = subprocess.run([sys.executable, "-m", "stepscope", "analyze", str(path), "--perfetto", str(out), "-q"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    events = json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    original = json.loads(read_bytes(path))["traceEvents"]
    pid = next(e["pid"] for e in events if e["ph"] == "M" and e["args"].get("name") == "stepscope")
    assert events[: len(original)] == original  # every original event, unchanged and in order
    return original, [e for e in events[len(original):]], pid


def test_own_tracks_on_their_own_process(tmp_path: Path) -> None:
    original, own, pid = annotate(training_trace(tmp_path / "t.json.gz"), tmp_path / "out.json.gz")
    assert pid not in {e.get("pid") for e in original}
    assert all(e["pid"] == pid for e in own)
    threads = {e["tid"]: e["args"]["name"] for e in own if e["name"] == "thread_name"}
    assert threads == {1: "verdict per step", 2: "DataLoader waits", 3: "sync points", 10: "GPU 0 idle (by cause)"}
    by_track = {tid: [e for e in own if e["tid"] == tid and e["ph"] != "M"] for tid in threads}
    steps = by_track[1]
    assert [e["name"].split(":")[0] for e in steps] == ["step 0", "step 1", "step 2"]
    assert steps[0]["ts"] == BASE_US and "breakdown_us" in steps[0]["args"]  # the source's own µs, not rebased
    assert {e["name"] for e in by_track[10]} <= {"host wait", "kernel wait", "other idle"}
    assert "host wait" in {e["name"] for e in by_track[10]}
    loader = by_track[2]
    assert len(loader) == 3 and all(e["dur"] == 300 for e in loader)
    syncs = by_track[3]
    assert len(syncs) == 3 and all(e["ph"] == "i" for e in syncs)
    assert syncs[0]["args"]["source"] == "train.py:42 (train_step)" and syncs[0]["args"]["op"] == "aten::item"
    original_syncs = sorted(e["ts"] for e in original if e["name"] == "cudaStreamSynchronize")
    assert [e["ts"] for e in syncs] == original_syncs  # lined up with the original events


def test_real_trace_keeps_its_events_and_lines_up(tmp_path: Path) -> None:
    path = kineto_trace("a100_event_sync_tiny.json.gz")
    original, own, _ = annotate(path, tmp_path / "out.json.gz")
    syncs = [e for e in own if e["tid"] == 3 and e["ph"] == "i"]
    starts = {(e["name"], e["ts"]) for e in original if e.get("ph") == "X"}
    assert syncs and all((e["name"], e["ts"]) in starts for e in syncs)
    steps = [e for e in own if e["tid"] == 1 and e["ph"] == "X"]
    profiler_steps = {e["ts"] for e in original if e["name"].startswith("ProfilerStep#")}
    assert steps and all(e["ts"] >= min(profiler_steps) for e in steps)


def test_plain_json_when_not_gz_and_one_trace_only(tmp_path: Path) -> None:
    trace = training_trace(tmp_path / "t.json")
    out = tmp_path / "out.json"
    done = subprocess.run([sys.executable, "-m", "stepscope", "analyze", str(trace), "--perfetto", str(out), "-q"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_bytes())["traceEvents"]
    folder = KINETO / "two_rank_job"
    if folder.exists():
        done = subprocess.run([sys.executable, "-m", "stepscope", "analyze", str(folder), "--perfetto",
                               str(tmp_path / "x.json.gz")], capture_output=True, text=True)
        assert done.returncode == 2 and "one trace" in done.stderr


def test_without_the_source_json_the_table_is_written(tmp_path: Path) -> None:
    """Sources that are not Chrome JSON (nsys) get their events from the trace table."""
    trace = load_traces([training_trace(tmp_path / "t.json")])[0]
    facts = compute_facts(trace)
    data = render("perfetto", analyze(trace), trace=trace, original=None, compress=False,
                  annotations=facts.annotations)
    events = json.loads(data)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(kernels) == 6 and min(e["ts"] for e in kernels) > BASE_US


@pytest.mark.parametrize("name", ["v100_ddp_train_rank1.json.gz"])
def test_big_trace_event_count_is_preserved(name: str, tmp_path: Path) -> None:
    path = kineto_trace(name)
    trace = load_traces([path])[0]
    facts = compute_facts(trace)
    data = render("perfetto", analyze(trace), trace=trace, original=read_bytes(path),
                  annotations=facts.annotations)
    events = json.loads(gzip.decompress(data))["traceEvents"]
    original = json.loads(read_bytes(path))["traceEvents"]
    own = events[len(original):]
    assert events[: len(original)] == original
    assert len({e["pid"] for e in own}) == 1 and {e["tid"] for e in own} >= {1, 10 + facts.gpu.devices[0].device}
