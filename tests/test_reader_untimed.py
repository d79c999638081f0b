"""Spans without a time or a duration, and spans of the categories no analysis reads ("Trace", flows), are left
out of the events table; the untimed ones are counted in a note. The reader takes a batch whole when it has
neither (the usual case) and filters only the batches that do: both ways give the table counted here by hand."""

from __future__ import annotations

import json
from pathlib import Path

from stepscope.trace.kineto import read_kineto


def _op(name: str, ts: float | None, dur: float | None, cat: str = "cpu_op") -> dict:
    event = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1}
    if ts is not None:
        event["ts"] = ts
    if dur is not None:
        event["dur"] = dur
    return event


def test_untimed_and_skipped_spans_are_left_out_and_the_untimed_counted(tmp_path: Path) -> None:
    events = [
        _op("PyTorch Profiler (0)", 0, 1000, cat="Trace"),  # skipped, not counted as untimed
        _op("aten::mm", 10, 5),
        _op("no time", None, 5),  # untimed
        _op("no duration", 20, None),  # untimed
        _op("aten::add", 30, 2),
        _op("both missing", None, None),  # untimed
        _op("skipped and untimed", None, None, cat="ac2g"),  # skipped: not counted
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = read_kineto(path)
    assert sorted(trace.strings[i] for i in trace.events.name) == ["aten::add", "aten::mm"]
    assert "3 events without a time or a duration (ts, dur) were left out" in trace.meta.notes
    assert sorted(trace.events.dur.tolist()) == [2000, 5000]  # µs in the file, ns in the table


def test_a_trace_with_every_span_timed_keeps_them_all(tmp_path: Path) -> None:
    events = [_op(f"op{i}", 10 * i, 3) for i in range(50)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = read_kineto(path)
    assert len(trace.events) == 50 and not any("without a time" in n for n in trace.meta.notes)
    assert trace.events.start.tolist() == [10_000 * i for i in range(50)]
