"""Files real tools write that strict parsers refuse are read, with a note saying what was repaired; values no
profiler produces are left out of the figures, with a note; gzip memory follows the data, not its trailer."""

from __future__ import annotations

import gzip
import json
import sqlite3
import tracemalloc
import zlib
from contextlib import closing
from pathlib import Path

import pytest

from builder import TraceBuilder
from nsys_builder import training_loop
from stepscope.errors import StepscopeError
from stepscope.pipeline import analyze
from stepscope.trace.files import MAX_GZIP_RATIO, read_bytes
from stepscope.trace.kineto import read_kineto
from stepscope.trace.kineto.repair import non_finite_to_null, replace_lone_surrogates
from stepscope.trace.load import read_trace
from stepscope.trace.names import MAX_NAME_CHARS
from stepscope.trace.nsys import read_nsys

STEP_US = 100.0


def three_steps() -> TraceBuilder:
    """Three 100 µs steps, each launching one 30 µs kernel: step time 100 µs, 3 steps."""
    b = TraceBuilder()
    for i in range(3):
        t = i * STEP_US
        b.step(i, t, t + STEP_US)
        b.launch("gemm", (t + 20, t + 25), (t + 30, t + 60))
    return b


def write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))  # Python's json writes NaN and Infinity bare, as real scripts do
    return path


def notes_of(path: Path) -> list[str]:
    return analyze(path).notes


# -- gzip -----------------------------------------------------------------------------------------------


def test_truncated_gzip_allocates_nothing_from_its_trailer(tmp_path: Path) -> None:
    # A cut .gz ends in bytes the old reader took for gzip's length field (ISIZE) and allocated; pick the cut
    # whose last four bytes claim the most (several GiB for a file of a few dozen bytes).
    packed = gzip.compress(json.dumps(three_steps().to_dict()).encode() * 50, mtime=0)
    cut = max(range(30, 80), key=lambda n: int.from_bytes(packed[n - 4 : n], "little"))
    assert int.from_bytes(packed[cut - 4 : cut], "little") > 2**30
    path = tmp_path / "t.json.gz"
    path.write_bytes(packed[:cut])
    tracemalloc.start()
    try:
        with pytest.raises(StepscopeError, match="truncated gzip"):
            read_bytes(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_gzip_members_are_concatenated_and_padding_ignored(tmp_path: Path) -> None:
    raw = json.dumps(three_steps().to_dict()).encode()
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(raw[:100]) + gzip.compress(raw[100:]) + b"\0" * 512)
    assert bytes(read_bytes(path)) == raw
    assert analyze(path).summary.step_count == 3


def test_gzip_bomb_is_refused_before_it_fills_memory(tmp_path: Path) -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    packed = b"".join(packer.compress(b"\0" * (1 << 20)) for _ in range(100)) + packer.flush()
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(packed)  # 100 MiB of zeros in ~100 KB: a ratio of ~1000
    with pytest.raises(StepscopeError, match=f"over {MAX_GZIP_RATIO}x its size"):
        read_bytes(path)


# -- what real tools write -----------------------------------------------------------------------------


def test_invalid_utf8_in_a_name_is_replaced(tmp_path: Path) -> None:
    raw = json.dumps(three_steps().to_dict()).encode().replace(b'"gemm"', b'"ge\xff\xfemm"', 1)
    (tmp_path / "t.json").write_bytes(raw)
    trace = read_kineto(tmp_path / "t.json")
    assert "ge\ufffd\ufffdmm" in trace.strings
    assert any("2 bytes that are not UTF-8" in n for n in trace.meta.notes)


def test_nan_and_infinity_are_read_as_missing(tmp_path: Path) -> None:
    doc = three_steps().to_dict()
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["args"]["flops"] = float("nan")
    kernel["args"]["bytes"] = float("inf")
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "x: NaN, y", "pid": 1, "tid": 1, "ts": 5,
                               "dur": float("-inf")})
    report = analyze(write(tmp_path / "t.json", doc))
    assert report.summary.step_count == 3 and report.summary.step_time_us == STEP_US
    assert any("3 NaN or Infinity values" in n for n in report.notes)


def test_non_finite_repair_leaves_strings_alone() -> None:
    doc = b'{"a": NaN, "n": "x: NaN, y", "b": [Infinity, -Infinity], "e": "q\\\\", "d": NaN}'
    fixed, count = non_finite_to_null(doc)
    assert count == 4
    assert json.loads(fixed) == {"a": None, "n": "x: NaN, y", "b": [None, None], "e": "q\\", "d": None}


def test_lone_surrogates_are_replaced_and_pairs_kept(tmp_path: Path) -> None:
    raw = json.dumps(three_steps().to_dict()).encode()
    raw = raw.replace(b'"gemm"', b'"gemm\\ud800"', 1).replace(b'"cudaLaunchKernel"', b'"launch \\ud83d\\ude00"', 1)
    (tmp_path / "t.json").write_bytes(raw)
    trace = read_kineto(tmp_path / "t.json")
    assert "gemm\ufffd" in trace.strings and "launch \U0001f600" in trace.strings
    assert any("1 lone UTF-16 surrogate" in n for n in trace.meta.notes)
    assert replace_lone_surrogates(b'"\\\\ud800"') == (b'"\\\\ud800"', 0)  # a backslash, then text


def test_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(three_steps().to_dict()).encode())
    report = analyze(tmp_path / "t.json")
    assert report.summary.step_count == 3
    assert any("byte-order mark" in n for n in report.notes)


def test_invalid_json_error_says_where(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_bytes(b'{"traceEvents": [\n{"ph": "X", "ts": 1,, "dur": 2}]}')
    with pytest.raises(StepscopeError, match=r"line 2, column 21"):
        read_kineto(tmp_path / "t.json")


# -- long names -----------------------------------------------------------------------------------------


def test_long_names_are_bounded_and_stay_distinct(tmp_path: Path) -> None:
    b = three_steps()
    long_a, long_b = "k" * 200_000 + "a", "k" * 200_000 + "b"  # differ only in their last character
    b.launch(long_a, (20, 21), (61, 62))
    b.launch(long_b, (120, 121), (161, 162))
    b.op("o" * 5_000_000, 10, 12)
    trace = read_kineto(b.write(tmp_path / "t.json"))
    long_names = [s for s in trace.strings if len(s) > MAX_NAME_CHARS]
    assert len(long_names) == 3 and len(set(long_names)) == 3
    assert all(len(s) < MAX_NAME_CHARS + 64 for s in long_names)
    assert any("3 names longer than 4,096 characters were shortened" in n for n in trace.meta.notes)


# -- impossible values ----------------------------------------------------------------------------------


def test_time_out_of_range_is_left_out(tmp_path: Path) -> None:
    doc = three_steps().to_dict()
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "far", "pid": 1000, "tid": 1000,
                               "ts": 2**70, "dur": 1})
    report = analyze(write(tmp_path / "t.json", doc))
    assert report.summary.step_count == 3 and report.summary.step_time_us == STEP_US
    assert any("1 events with a time or duration out of range (e.g. 1.181e+21 µs)" in n for n in report.notes)


def test_negative_sm_count_is_unknown(tmp_path: Path) -> None:
    doc = three_steps().to_dict()
    doc["deviceProperties"][0]["numSms"] = -1
    report = analyze(write(tmp_path / "t.json", doc))
    assert report.device is not None and report.device.sm_count is None
    assert any("numSms -1 is not a count" in n for n in report.notes)


def test_zero_length_steps_are_left_out(tmp_path: Path) -> None:
    doc = three_steps().to_dict()
    step_one = next(e for e in doc["traceEvents"] if e["name"] == "ProfilerStep#1")
    step_one["dur"] = 0
    report = analyze(write(tmp_path / "t.json", doc))
    assert [s.id for s in report.steps] == ["0", "2"]
    assert "step 1: zero length: left out" in report.summary.dropped_steps


def test_all_steps_zero_length_fall_back_to_the_gpu_span(tmp_path: Path) -> None:
    doc = three_steps().to_dict()
    for e in doc["traceEvents"]:
        if e["name"].startswith("ProfilerStep"):
            e["dur"] = 0
    report = analyze(write(tmp_path / "t.json", doc))
    assert report.summary.step_source == "GPU activity span"  # no step left: the span of the GPU's work
    assert report.summary.step_time_us and report.summary.step_time_us > 0
    assert any("no step from ProfilerStep" in n for n in report.summary.dropped_steps)


def test_two_steps_under_one_name_are_said(tmp_path: Path) -> None:
    b = three_steps()
    b.step(1, 300, 400)  # ProfilerStep#1 again, after step 2
    b.launch("gemm", (320, 325), (330, 360))
    report = analyze(b.write(tmp_path / "t.json"))
    assert [s.id for s in report.steps] == ["0", "1", "2"]
    assert any("step 1: recorded 2 times" in n for n in report.summary.dropped_steps)


def test_an_op_named_like_a_step_inside_a_step_is_no_step(tmp_path: Path) -> None:
    b = three_steps()
    b.op("ProfilerStep#7", 40, 50)
    report = analyze(b.write(tmp_path / "t.json"))
    assert [s.id for s in report.steps] == ["0", "1", "2"]
    assert "step 7: lies inside another step's range: left out" in report.summary.dropped_steps


# -- Nsight Systems exports ------------------------------------------------------------------------------


def _export(tmp_path: Path, *sql: str) -> Path:
    path = training_loop().write(tmp_path / "t.sqlite")
    with closing(sqlite3.connect(path)) as db:
        for statement in sql:
            db.execute(statement)
        db.commit()
    return path


def test_nsys_start_out_of_range_is_left_out(tmp_path: Path) -> None:
    clean = read_nsys(training_loop().write(tmp_path / "clean.sqlite"))
    path = _export(tmp_path, f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = {-2**62} WHERE rowid = 3")
    trace = read_nsys(path)
    assert len(trace.events) == len(clean.events) - 1
    assert int(trace.events.start.min()) == 0 and int(trace.events.end.max()) == int(clean.events.end.max())
    assert any("1 rows with a start or duration out of range" in n for n in trace.meta.notes)


def test_nsys_without_cuda_tables_reads_its_ranges(tmp_path: Path) -> None:
    tables = ("KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "SYNCHRONIZATION")
    path = _export(tmp_path, *(f"DROP TABLE CUPTI_ACTIVITY_KIND_{t}" for t in tables))
    report = analyze(path)
    assert report.summary.step_count == 5  # the train_step NVTX ranges


def test_nsys_launches_without_a_kernel_table_are_said(tmp_path: Path) -> None:
    tables = ("KERNEL", "MEMCPY", "MEMSET", "SYNCHRONIZATION")
    report = analyze(_export(tmp_path, *(f"DROP TABLE CUPTI_ACTIVITY_KIND_{t}" for t in tables)))
    # training_loop() launches 24 kernels in each of 5 steps.
    assert any("120 kernel launches but no kernel was recorded" in n for n in report.notes)


def test_random_bytes_named_sqlite_are_called_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(StepscopeError, match="not an SQLite database"):
        read_trace(path)
