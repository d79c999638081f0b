"""Evidence reads as words with units: the unit token in a field's name (`_us`, `_bytes`, `_gb_s`, `_share`) chooses
the number's unit and leaves the label; step ids sort by number; a named thing reads as its name and figures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stepscope.report.evidence import evidence_items, label, value_text

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(("key", "value", "words"), [
    # The cases the issue quotes, read as a user would write them.
    ("dataloader_us_per_step", 31_000.0, ("DataLoader time per step", "31.0 ms")),
    ("pageable_gb_s", 9.87, ("pageable bandwidth", "9.87 GB/s")),
    ("slowest_call", {"first_call_cost": False, "name": "cudaLaunchKernel", "us": 67.4},
     ("slowest call", "cudaLaunchKernel (67.4 µs)")),
    ("slowest_call", {"first_call_cost": True, "name": "cudaMalloc", "us": 1500.0},
     ("slowest call", "cudaMalloc (1.5 ms, first call cost)")),
    ("share_per_step", {"10": 0.584, "11": 0.557, "7": 0.5, "9": 0.25},
     ("share per step", "7: 50.0%, 9: 25.0%, 10: 58.4%, 11: 55.7%")),
    # A wait is a time already: no "wait time".
    ("dataloader_wait_us_per_step", 250.0, ("DataLoader wait per step", "250.0 µs")),
    ("largest_copy_bytes", 19_267_584, ("largest copy", "19.3 MB")),
    ("htod_bandwidth_gb_s", 12.3, ("host-to-device bandwidth", "12.3 GB/s")),
    ("likely_shape", [32, 3, 224, 224], ("likely shape", "32x3x224x224")),
    ("batch_factor", 2, ("batch factor", "2x")),
    ("num_workers", 0, ("number of workers", "0")),
    ("primary_in_steps", ["10", "8", "9"], ("primary in steps", "8, 9, 10")),
    ("primary_in_steps", [], ("primary in steps", "none")),
    ("gpu_busy_share", 0.616, ("GPU busy share", "61.6%")),
    # Ops by time, the largest first: a reader looks for the biggest.
    ("top_ops_us_per_step", {"aten::a": 100.0, "aten::b": 3000.0}, ("top ops time per step",
                                                                   "aten::b: 3.0 ms, aten::a: 100.0 µs")),
])
def test_a_field_reads_as_words_with_its_unit(key: str, value: object, words: tuple[str, str]) -> None:
    assert evidence_items({key: value}) == [words]


def test_a_field_without_a_value_is_left_out_and_fields_keep_their_order() -> None:
    items = evidence_items({"b_share": 0.5, "free_cores": None, "a_count": 3})
    assert items == [("a count", "3"), ("b share", "50.0%")]


def test_table_headers_leave_the_unit_to_the_cells() -> None:
    assert [label(k, table=True) for k in ("cpu_fwd_us", "own_gpu_us", "time_us_per_step", "count_per_step")] == [
        "CPU fwd", "own GPU", "time per step", "count per step"]
    assert value_text("line", 1234) == "1234"  # a line number is a name, not a count


RAW = re.compile(r"\b(us|gb s|bytes)\b|[{}]|\b(True|False|None)\b|_")


@pytest.mark.parametrize("name", ["launch_bound", "input_bound", "copy_bound", "sync_bound", "big_matmul"])
def test_real_evidence_has_no_raw_key_or_python_literal(name: str) -> None:
    """Every pattern's and fix's evidence of real H100 runs: no unit token left in a label, no dict or Python
    literal in a value (names from the trace, such as kernel names, may hold underscores: only labels are held
    to that)."""
    from stepscope.pipeline import analyze

    report = analyze(DATA / "gpu_h100" / name / "trace.json.gz")
    items = [item for x in [*report.patterns, *report.recommendations] for item in evidence_items(x.evidence)]
    assert items
    for key, text in items:
        assert not RAW.search(key), key
        assert not re.search(r"[{}]|\b(True|False|None)\b", text), (key, text)
    json.dumps(items)  # plain strings
