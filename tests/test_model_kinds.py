"""The model's enumerated strings (model/kinds.py): a value outside its Literal is refused on decode, and every id
the code can write is in its Literal, read from the writers themselves (the advice rules' registry, tune's fixes,
the literal ids in the advice's source), not from a copied list."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import msgspec
import pytest

from stepscope.advice.rules import RULES
from stepscope.model import kinds
from stepscope.model import report as s
from stepscope.model.meter import METER_SCHEMA, MeterRecord, meter_from_json
from stepscope.tune.fixes import CODE_CHANGES, FIXES

ADVICE = Path(kinds.__file__).parents[1] / "advice"
# The calls that name a pattern or a fix by a literal string: (function, the argument holding the id).
ID_CALLS = {"recommendation": 1, "from_parts": 1, "make": 0}


def _literal_ids() -> tuple[set[str], set[str]]:
    """The pattern and fix ids the advice's source writes as literals: recommendation(ctx, "amp", ...),
    from_parts(ctx, "input_bound", ...), s.Considered(id="cpu_threads", ...), s.Pattern(id="input_bound", ...)."""
    patterns: set[str] = set()
    fixes: set[str] = set()
    for path in ADVICE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            args = [node.args[ID_CALLS[name]]] if name in ID_CALLS and len(node.args) > ID_CALLS[name] else []
            args += [k.value for k in node.keywords if k.arg in ("id", "rec_id", "pattern_id")]
            for arg in args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    kind = patterns if name in ("from_parts", "make", "Pattern") else fixes
                    kind.add(arg.value)
    return patterns, fixes


def test_every_fix_the_code_can_name_is_a_fix_id() -> None:
    allowed = set(get_args(kinds.FixId))
    rules = {rule.__name__ for rule in RULES}  # each rule is named as the fix it recommends
    _, written = _literal_ids()
    assert len(written) >= len(RULES)  # the scan found the rules' ids
    assert rules <= allowed, rules - allowed
    assert written <= allowed, written - allowed
    assert set(FIXES) <= allowed, set(FIXES) - allowed
    assert set(CODE_CHANGES) <= allowed, set(CODE_CHANGES) - allowed


def test_every_pattern_the_code_can_name_is_a_pattern_id() -> None:
    written, _ = _literal_ids()
    assert {"input_bound", "gpu_compute_bound", "python_overhead"} <= written  # GPU, CPU and meter patterns seen
    assert written <= set(get_args(kinds.PatternId)), written - set(get_args(kinds.PatternId))


def test_the_values_the_pipeline_writes_are_in_their_literals() -> None:
    from stepscope.pipeline import meter as pipeline_meter
    from stepscope.runreport import capture_status

    assert {pipeline_meter.BEFORE, pipeline_meter.NONE_RAN, pipeline_meter.AFTER} == set(get_args(kinds.MeterBasis))
    statuses = {"finished", "exception", "exit", "interrupted", "terminated"}  # the program's ends capture knows
    written = {capture_status(_Result(trace, recorded, complete), status) for status in statuses
               for trace, recorded, complete in ((None, 0, False), ("t", 3, True), ("t", 3, False))}
    assert written == set(get_args(kinds.RunStatus))


class _Result:
    def __init__(self, trace: str | None, recorded: int, complete: bool) -> None:
        self.trace_path, self.steps_recorded, self.window_complete = trace, recorded, complete


def _report(**patch: object) -> dict:
    report = s.Report(source=s.Source(paths=["t.json"], format="kineto"), device=None, steps=[],
                      summary=s.Summary(step_time_us=None, breakdown_us={}, gpu_utilization=None),
                      patterns=[s.Pattern(id="input_bound", share=0.3, evidence={})],
                      recommendations=[s.Recommendation(id="amp", title="t", evidence={},
                                                        location=s.Location(file="train.py", line=3),
                                                        estimated_speedup=1.2)])
    doc = msgspec.json.decode(s.to_json(report))
    for path, value in patch.items():
        *where, last = path.split(".")
        node = doc
        for key in where:
            node = node[int(key)] if key.isdigit() else node[key]
        node[last] = value
    return doc


@pytest.mark.parametrize(("path", "value", "where"), [
    ("patterns.0.id", "slow_bound", "$.patterns[0].id"),
    ("recommendations.0.id", "buy_a_gpu", "$.recommendations[0].id"),
    ("source.format", "pcap", "$.source.format"),
    ("accelerator", "tpu", "$.accelerator"),
    ("recommendations.0.location", {"file": "train.py"}, "$.recommendations[0].location"),  # no line
])
def test_a_report_with_a_bad_enumerated_value_is_refused_at_its_place(path: str, value: object, where: str) -> None:
    assert s.from_json(msgspec.json.encode(_report())).patterns[0].id == "input_bound"  # the good one reads
    with pytest.raises(msgspec.ValidationError) as err:
        s.from_json(msgspec.json.encode(_report(**{path: value})))
    assert where in str(err.value)


def test_a_location_keeps_its_json_shape() -> None:
    doc = _report()
    assert doc["recommendations"][0]["location"] == {"file": "train.py", "line": 3, "function": "", "code": ""}
    # and its key order: sorted, as the dicts it replaced were written (report.json byte for byte as before)
    assert list(doc["recommendations"][0]["location"]) == sorted(doc["recommendations"][0]["location"])


def test_a_meter_file_with_unknown_hooks_is_refused() -> None:
    good = msgspec.json.encode(MeterRecord(source="optimizer", hooks="C"))
    assert meter_from_json(good).hooks == "C"
    bad = msgspec.json.encode({**msgspec.json.decode(good), "hooks": "Rust"})
    with pytest.raises(msgspec.ValidationError, match=r"\$\.hooks"):
        meter_from_json(bad)
    assert msgspec.json.decode(good)["schema"] == METER_SCHEMA
