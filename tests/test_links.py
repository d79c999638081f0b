"""trace/links.py on hand-built traces: the counts in its notes, and which repeated events count once."""

from __future__ import annotations

import json
from pathlib import Path

from builder import TraceBuilder
from stepscope.trace.kineto import read_kineto


def write(tmp_path: Path, events: list[dict]) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def five_launches() -> TraceBuilder:
    b = TraceBuilder()
    b.step(1, 0, 500)
    for i in range(5):
        b.launch("gemm", (10 + 50 * i, 20 + 50 * i), (30 + 50 * i, 60 + 50 * i))
    return b


def test_gpu_activities_without_a_launch_link_are_counted(tmp_path: Path) -> None:
    b = five_launches()
    kernels = [e for e in b.events if e["cat"] == "kernel"]
    del kernels[0]["args"]["correlation"], kernels[1]["args"]["correlation"]  # two without an id
    kernels[2]["args"]["correlation"] = 999  # one whose id no runtime call has
    notes = read_kineto(write(tmp_path, b.events)).meta.notes
    assert any(n.startswith("2 of 5 GPU activities") and "no correlation id" in n for n in notes), notes
    assert any(n.startswith("1 of 5 GPU activities") and "no recorded runtime call has it" in n for n in notes)


def test_an_event_written_twice_counts_once_and_is_said(tmp_path: Path) -> None:
    b = five_launches()
    events = b.events + [dict(e) for e in b.events if e["cat"] == "kernel"][:3]
    trace = read_kineto(write(tmp_path, events))
    assert int((trace.events.kind == 4).sum()) == 5  # Kind.KERNEL
    assert any(n.startswith("3 events were exact copies") for n in trace.meta.notes), trace.meta.notes


def test_look_alike_events_without_ids_are_both_kept(tmp_path: Path) -> None:
    """In a µs-resolution trace two real ops can share a time, a name and a thread; without an id to say they
    are one event, both stay."""
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 100, "dur": 1}
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 500}
    trace = read_kineto(write(tmp_path, [step, op, dict(op)]))
    assert len(trace.events) == 3 and not any("copies" in n for n in trace.meta.notes)


def test_nameless_and_threadless_events_are_counted(tmp_path: Path) -> None:
    b = five_launches()
    kernels = [e for e in b.events if e["cat"] == "kernel"]
    del kernels[0]["name"]
    kernels[1]["name"] = ""
    runtime = [e for e in b.events if e["cat"] == "cuda_runtime"]
    del runtime[0]["tid"]
    notes = read_kineto(write(tmp_path, b.events)).meta.notes
    assert any(n.startswith("2 events have no name") for n in notes), notes
    assert any(n.startswith("1 host events have no process or thread id") for n in notes), notes
