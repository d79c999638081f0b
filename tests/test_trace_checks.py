"""A trace whose CPU ops carry no duration says so (issue 42, a silent result: every CPU op at 0 ns made the host's
gaps a "cpu compute bound 17%" with no word). Planted: a real H100 trace with every cpu_op's dur set to 0; the real
fixtures, as recorded, say nothing."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from stepscope.analysis.trace_checks import untimed_ops_note
from stepscope.pipeline import analyze
from stepscope.trace.load import read_trace

DATA = Path(__file__).parent / "data" / "gpu_h100"


def test_ops_without_duration_are_said(tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress((DATA / "input_bound" / "trace.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") == "cpu_op" and "dur" in e:
            e["dur"] = 0
    planted = tmp_path / "untimed.json"
    planted.write_text(json.dumps(doc))
    report = analyze(planted)
    assert any("CPU ops have no duration (0 ns)" in n for n in report.notes), report.notes


def test_kernels_moved_seconds_after_their_launches_are_said(tmp_path: Path) -> None:
    # Every kernel of a real H100 trace moved 10 s later, its copies left in place: the step came out 53x its
    # recorded 38.5 ms, and no pattern, with no word.
    doc = json.loads(gzip.decompress((DATA / "input_bound" / "trace.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["ts"] += 10_000_000
    planted = tmp_path / "moved.json"
    planted.write_text(json.dumps(doc))
    notes = analyze(planted).notes
    assert any(n.startswith("kernels start a median 10 s after their launch calls") for n in notes), notes
    assert not any("launch calls" in n for n in analyze(DATA / "input_bound" / "trace.json.gz").notes)


def test_the_real_fixtures_say_nothing() -> None:
    traces = sorted(DATA.glob("*/trace.json.gz"))
    assert len(traces) >= 5
    for path in traces:
        assert untimed_ops_note(read_trace(path)) is None, path
