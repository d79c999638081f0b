"""The streamed Kineto read: batches cut only between events, the text never held whole, and the same trace as
the whole-file reader (the reader before streaming, which stays for files that need repairs) on every
shared trace and on JSON made to trip the cuts."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from builder import TraceBuilder
from conftest import KINETO
from stepscope.trace.kineto import reader, stream
from stepscope.trace.model import Trace

SHARED = sorted(KINETO.glob("*.json.gz")) if KINETO.exists() else []


def same_trace(a: Trace, b: Trace) -> None:
    assert a.strings == b.strings and a.meta == b.meta and a.op_inputs == b.op_inputs
    for name in a.events.__dataclass_fields__:
        assert np.array_equal(getattr(a.events, name), getattr(b.events, name), equal_nan=True), name
    for name in a.memory.__dataclass_fields__:
        assert np.array_equal(getattr(a.memory, name), getattr(b.memory, name)), name


@pytest.mark.parametrize("path", SHARED, ids=[p.name for p in SHARED])
def test_streamed_equals_whole_on_shared_traces(path: Path) -> None:
    same_trace(reader._read_streaming(path, None), reader._read_whole(path))


def tricky_doc() -> dict:
    """Names and args that hold the text of a cut (`}, {`, `}]`), nested objects and lists of objects, and the
    top level's keys on both sides of traceEvents."""
    b = TraceBuilder()
    for i in range(60):
        t = i * 100.0
        b.step(i, t, t + 90)
        b.op('weird }, { name }]', t + 1, t + 50, **{"Concrete Inputs": ["}, {", "[{]}"], "nested": [{"a": {}}, {}]})
        b.launch("kernel }, {\"x\": 1}", (t + 2, t + 6), (t + 10, t + 40))
    doc = b.to_dict()
    events = doc.pop("traceEvents")
    return {"deviceProperties": doc["deviceProperties"], "traceEvents": events, "traceName": "x ]}",
            "distributedInfo": {"rank": 3, "world_size": 4}, "baseTimeNanoseconds": 1_700_000_000_000_000_000}


@pytest.mark.parametrize("indent", [None, 2])
def test_cuts_fall_only_between_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indent: int | None) -> None:
    monkeypatch.setattr(stream, "BATCH_BYTES", 1500)  # many cuts, every one tried against the tricky text
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(tricky_doc(), indent=indent).encode()))
    streamed = reader._read_streaming(path, None)
    same_trace(streamed, reader._read_whole(path))
    assert streamed.meta.rank == 3 and streamed.meta.start_epoch_ns is not None
    assert len(streamed.events) == 60 * 4  # step, op, runtime call, kernel


def test_a_bare_event_list_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "BATCH_BYTES", 1500)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(tricky_doc()["traceEvents"]))
    same_trace(reader._read_streaming(path, None), reader._read_whole(path))


def test_the_text_is_never_held_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fed 4 KiB at a time, the buffer never holds more than a batch, a piece and an event (about 300 bytes)."""
    monkeypatch.setattr(stream, "BATCH_BYTES", 16 << 10)
    text = json.dumps(tricky_doc()).encode()  # 60 steps, ~60 KB

    def decode(batch: bytes) -> list | None:
        try:
            return json.loads(batch)
        except json.JSONDecodeError:
            return None  # a cut inside an event: the stream tries an earlier one

    pieces = (text[i : i + 4096] for i in range(0, len(text), 4096))
    batches = stream.EventBatches(pieces, decode)
    largest, count = 0, 0
    for events in batches:
        largest = max(largest, len(batches._buffer))
        count += len(events)
    assert count == len(tricky_doc()["traceEvents"])
    assert largest <= (16 << 10) + 4096 + 1000 and largest < len(text) / 2
    assert json.loads(batches.outline)["distributedInfo"] == {"rank": 3, "world_size": 4}


def test_files_that_need_repairs_are_read_whole(tmp_path: Path) -> None:
    """NaN (Python's json writes it) is not JSON: the streamed read gives up and the whole-file reader repairs."""
    doc = tricky_doc()
    doc["traceEvents"][5]["args"]["flops"] = float("nan")
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(stream.NotStreamable):
        reader._read_streaming(path, None)
    trace = reader.read_kineto(path)
    assert any("NaN" in n for n in trace.meta.notes) and len(trace.events) == 240


def test_progress_follows_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    from stepscope.commands import progress as shown

    monkeypatch.setattr(stream, "BATCH_BYTES", 1500)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(tricky_doc()))
    calls: list[tuple[int, int]] = []
    reader.read_kineto(path, progress=lambda done, total: calls.append((done, total)))
    size = path.stat().st_size
    assert calls and {t for _, t in calls} == {size}  # one call per batch; the file is read 8 MiB at a time
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and calls[-1][0] == size
    monkeypatch.setattr(shown, "AFTER_S", 0.0)
    monkeypatch.setattr(shown, "EVERY_S", 0.0)
    line = shown.ReadingProgress(path)
    line(size // 2, size)
    line.close()
    assert f"reading t.json: 50% of {size / 1e6:,.0f} MB" in capsys.readouterr().err
