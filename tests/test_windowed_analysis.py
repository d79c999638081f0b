"""On a large trace the interval algebra works a window of time at a time and the host threads are numbered a chunk
of rows at a time (memory). Forced down to tiny windows, a real GPU trace's whole report must be what it is with
no windows at all: the definition, applied to the whole sets at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepscope.analysis import nesting
from stepscope.model.report import to_json
from stepscope.pipeline import analyze
from stepscope.trace import intervals as iv

DATA = Path(__file__).parent / "data"
TRACES = [DATA / "gpu_h200" / name / "trace.json.gz" for name in ("input_bound", "transformer_block")]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.parent.name)
def test_tiny_windows_give_the_same_report(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    monkeypatch.setattr(iv, "WINDOW", 1 << 40)
    monkeypatch.setattr(nesting, "CHUNK_ROWS", 1 << 40)
    whole = to_json(analyze(path))
    monkeypatch.setattr(iv, "WINDOW", 5)
    monkeypatch.setattr(nesting, "CHUNK_ROWS", 7)
    assert to_json(analyze(path)) == whole


def test_threads_numbered_a_chunk_at_a_time_as_all_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    monkeypatch.setattr(nesting, "CHUNK_ROWS", 13)
    rng = np.random.default_rng(8)
    pid = rng.choice([7, 3, 10**12], 500)
    tid = rng.choice([1, 2, 99, -5], 500)
    rows = rng.random(500) < 0.6
    out = np.full(500, -1, dtype=np.int32)
    nesting.number_threads(pid, tid, rows, out)
    assert out[rows].tolist() == nesting.thread_numbers(pid[rows], tid[rows]).tolist()
    assert (out[~rows] == -1).all()


def test_outermost_rows_a_chunk_at_a_time_match_the_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outermost: no earlier row (table order) of the same set and thread still running when it starts."""
    import numpy as np

    from stepscope.analysis import hostops
    from stepscope.trace.load import read_trace
    from stepscope.trace.model import Kind

    trace = read_trace(TRACES[1])
    ev = trace.events
    ops = np.flatnonzero(ev.kind == Kind.CPU_OP)
    thread = hostops.host_threads(trace).thread
    want, latest = [], {}
    for r in ops.tolist():
        t = int(thread[r])
        if int(ev.start[r]) >= latest.get(t, -(2**62)):
            want.append(r)
        latest[t] = max(latest.get(t, -(2**62)), int(ev.end[r]))
    for chunk in (3, 1 << 18):
        monkeypatch.setattr(nesting, "CHUNK_ROWS", chunk)
        assert hostops.outermost(trace, ops).tolist() == want
        assert hostops.outermost(trace, ops[::-1].copy()).tolist() == want  # any order in, table order out
