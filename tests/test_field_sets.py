"""The JSON documents' field sets against their published lists: DESIGN.md's stepscope.report/1 block (fields are
added, never renamed or removed), docs/tune.md's stepscope.tune/1 block (every field of the Tune is documented
there, every documented key is a field), and meter.json's fields as stepscope.meter/1 first shipped them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args, get_origin

import msgspec

from stepscope.model import report as s
from stepscope.model.meter import MeterRecord, MeterSteps, WorkerBatches
from stepscope.model.tune import Tune

DOCS = Path(__file__).parents[1] / "docs"

# DESIGN.md, "The JSON report": the fields its block names, by section (a public contract).
DESIGN_REPORT = {
    s.Report: {"schema", "source", "device", "steps", "summary", "patterns", "recommendations"},
    s.Source: {"paths", "format"},
    s.Device: {"name", "kind"},
    s.StepRow: {"id", "duration_us", "breakdown_us", "gpu_utilization"},
    s.Summary: {"step_time_us", "breakdown_us", "gpu_utilization", "samples_per_s"},
    s.Pattern: {"id", "share", "evidence"},
    s.Recommendation: {"id", "title", "evidence", "location", "estimated_speedup"},
    s.Location: {"file", "line"},
}
# meter.json as stepscope.meter/1 was published (model/meter.py): added to, never renamed or removed.
METER_FIELDS = {
    MeterRecord: {"schema", "source", "batch_size", "done", "steps", "profiled_spans", "profiled", "overflow_steps",
                  "overflow_totals_ns", "workers", "device_timer", "device_busy", "host_cpu", "num_workers",
                  "cpu_cores", "hooks", "notes"},
    MeterSteps: {"first_step", "end_ns", "wall_ns", "data_ns", "forward_ns", "backward_ns", "optimizer_ns", "sync_ns",
                 "device_ns", "device_forward_ns", "device_backward_ns", "device_optimizer_ns"},
    WorkerBatches: {"workers", "worker_id", "start_ns", "ready_ns", "cpu_ns"},
}


def _encoded_fields(kind: type[msgspec.Struct]) -> set[str]:
    return {f.encode_name for f in msgspec.structs.fields(kind)}


def test_the_report_has_every_field_design_md_publishes() -> None:
    for kind, published in DESIGN_REPORT.items():
        assert published <= _encoded_fields(kind), (kind.__name__, published - _encoded_fields(kind))


def test_meter_json_keeps_its_published_fields() -> None:
    for kind, published in METER_FIELDS.items():
        assert published <= _encoded_fields(kind), (kind.__name__, published - _encoded_fields(kind))


def _structs(kind: Any, seen: set[type]) -> set[type]:
    """Every struct type reachable from `kind`'s fields."""
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        if kind in seen:
            return seen
        seen.add(kind)
        for f in msgspec.structs.fields(kind):
            _structs(f.type, seen)
    elif get_origin(kind) is not None or get_args(kind):
        for arg in get_args(kind):
            _structs(arg, seen)
    return seen


def test_tune_json_fields_are_the_ones_docs_tune_md_lists() -> None:
    text = (DOCS / "tune.md").read_text()
    block = next(b for b in re.findall(r"```[a-z]*\n(.*?)```", text, re.S) if '"schema": "stepscope.tune/1"' in b)
    quoted = set(re.findall(r'"([a-z_0-9]+)"', block))
    keys = set(re.findall(r'"([a-z_0-9]+)":', block))  # a quoted name with a value after it: a key
    fields = {name for kind in _structs(Tune, set()) for name in _encoded_fields(kind)}
    assert fields <= quoted, f"Tune fields docs/tune.md does not list: {sorted(fields - quoted)}"
    params = {"dataloader_workers", "num_workers"}  # the example of `params`: a fix id and its setting
    assert keys - params <= fields, f"keys docs/tune.md lists that the Tune has not: {sorted(keys - params - fields)}"
