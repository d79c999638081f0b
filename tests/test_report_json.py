"""The JSON contract: field names are public; a rename must fail here."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from builder import TraceBuilder
from stepscope.model.report import SCHEMA, Report, from_json, to_json

# The stepscope.report/1 fields as of this version. Add new ones here; never remove or rename.
REPORT_FIELDS = {
    "schema", "generator", "source", "device", "devices", "accelerator", "rank", "world_size", "steps",
    "summary", "gpu", "kernels", "syncs", "copies", "memory", "patterns", "recommendations", "ranks",
    "cross_rank", "notes", "timeline", "run", "lines", "modules", "prediction", "utilization", "memory_usage",
    "replay", "meter", "considered", "batch_sizes",
}
BATCH_SIZES_FIELDS = {"batch_size", "step_us", "grow_us", "basis", "fixed_bytes", "per_sample_bytes", "capacity_bytes",
                      "rows"}
BATCH_ROW_FIELDS = {"batch_size", "step_us", "samples_per_s", "peak_bytes", "fits", "current"}
STEP_FIELDS = {"id", "duration_us", "breakdown_us", "gpu_utilization", "kernel_count", "sync_count", "sync_us",
               "htod_bytes"}
SUMMARY_FIELDS = {"step_time_us", "breakdown_us", "gpu_utilization", "samples_per_s", "steps_per_s",
                  "step_count", "step_source", "dropped_steps", "timeline_step_time_us", "batch_size",
                  "batch_size_source", "noise"}
BREAKDOWN_KEYS = {"kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other"}
# The rank folder's sections (docs/distributed.md): the first six and four fields, then the cross-rank additions.
RANK_FIELDS = {
    "rank", "path", "step_time_us", "breakdown_us", "gpu_utilization", "primary_pattern",
    "collectives", "arrived_last_share", "wait_us", "wait_caused_us", "own_time_us", "communication_us",
    "exposed_communication_us", "overlap_ratio", "clock_offset_us", "step_times_us", "step_wait_us",
}
CROSS_RANK_FIELDS = {
    "ranks", "slowest_rank", "fastest_rank", "step_time_spread",
    "step_ids", "step_time_us", "matched_by", "collectives", "arrival_skew_us", "median_rank", "straggler",
    "exposed_communication_us", "overlap_ratio", "top_collectives", "diagnoses", "failures", "notes",
    "duplicate_ranks",
}
STRAGGLER_FIELDS = {"rank", "path", "median_rank", "arrived_last_share", "late_collectives", "collectives",
                    "wait_caused_per_rank_us", "cause", "lead_in_us", "median_lead_in_us", "statement"}
CAUSE_FIELDS = {"category", "label", "straggler_us", "median_us", "ratio"}
COLLECTIVE_FIELDS = {"name", "group", "seq", "step", "bytes", "ranks", "arrival_skew_us", "last_rank",
                     "max_wait_us", "mean_wait_us"}
DIAGNOSIS_FIELDS = {"role", "rank", "path", "step_time_us", "patterns", "recommendations"}
GLOO_JOB = Path(__file__).parent / "data" / "gloo_ddp" / "dataloader_straggler"


def _report(tmp_path: Path) -> Report:
    from stepscope import analyze

    b = TraceBuilder()
    b.step(1, 0, 100)
    b.launch("k", (0, 1), (2, 30))
    b.copy("HtoD", (31, 32), (33, 40), nbytes=100)
    b.runtime("cudaStreamSynchronize", 41, 45)
    return analyze(b.write(tmp_path / "t.json"))


def test_field_names_are_stable(tmp_path: Path) -> None:
    doc = json.loads(to_json(_report(tmp_path)))
    assert doc["schema"] == SCHEMA == "stepscope.report/1"
    # Exact: a removal or rename fails, and so does an addition nobody wrote down here.
    assert set(doc) == REPORT_FIELDS
    assert set(doc["steps"][0]) == STEP_FIELDS
    assert set(doc["summary"]) == SUMMARY_FIELDS
    assert set(doc["summary"]["breakdown_us"]) == BREAKDOWN_KEYS == set(doc["steps"][0]["breakdown_us"])
    assert {"name", "kind"} <= set(doc["device"])
    assert {"paths", "format"} == set(doc["source"])


def test_round_trip_and_refusal_of_other_schemas(tmp_path: Path) -> None:
    report = _report(tmp_path)
    assert from_json(to_json(report)) == report
    doc = json.loads(to_json(report))
    doc["schema"] = "stepscope.report/99"
    try:
        from_json(json.dumps(doc))
    except ValueError as exc:
        assert "stepscope.report/99" in str(exc)
    else:
        raise AssertionError("another schema version must be refused")
    assert msgspec.json.decode(to_json(report))["generator"].startswith("stepscope ")


def test_rank_folder_field_names_are_stable() -> None:
    from stepscope import analyze
    from stepscope.model.report import RankFailure
    from stepscope.trace.load import load_traces

    doc = json.loads(to_json(analyze(load_traces([GLOO_JOB]))))  # four real gloo ranks, rank 2 late
    assert set(doc) == REPORT_FIELDS
    assert len(doc["ranks"]) == 4 and all(set(row) == RANK_FIELDS for row in doc["ranks"])
    cross = doc["cross_rank"]
    assert set(cross) == CROSS_RANK_FIELDS
    assert set(cross["straggler"]) == STRAGGLER_FIELDS and set(cross["straggler"]["cause"]) == CAUSE_FIELDS
    assert cross["top_collectives"] and all(set(c) == COLLECTIVE_FIELDS for c in cross["top_collectives"])
    assert cross["diagnoses"] and all(set(d) == DIAGNOSIS_FIELDS for d in cross["diagnoses"])
    assert set(msgspec.to_builtins(RankFailure(path="a", error="b"))) == {"path", "error"}


def test_batch_sizes_field_names_are_stable(tmp_path: Path) -> None:
    from stepscope import analyze

    b = TraceBuilder()
    b.step(1, 0, 100)
    b.launch("k", (0, 1), (2, 30))
    doc = json.loads(to_json(analyze(b.write(tmp_path / "t.json"), batch_size=8)))
    assert set(doc["batch_sizes"]) == BATCH_SIZES_FIELDS
    assert doc["batch_sizes"]["rows"] and all(set(r) == BATCH_ROW_FIELDS for r in doc["batch_sizes"]["rows"])
