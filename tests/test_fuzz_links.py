"""No silent wrong answers: every kind of broken link (tests/fuzz_links.py) on a fixed sample of traces whose
verdict is known. Each mangled trace is refused with a one-line error, or analysed to the original's primary
pattern, step time and step count, or its report carries a note the original's has not, naming the field.
A traceback fails the test. The wider run (more seeds, a table per kind) is benchmarks/bench_fuzz.py --links."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fuzz_links as fl
from stepscope.errors import StepscopeError
from stepscope.pipeline import analyze

SEEDS = {"kineto": (0,), "nsys": (0, 1)}  # every Kineto kind on all seven scenarios; Nsight kinds on two exports
# The kinds the last round found changing a verdict or a step with no word: each must still change something
# in the sample (the damage is real), and say so.
KNOWN_SILENT_BEFORE = ("kernel_correlation_missing", "runtime_correlation_missing", "runtime_missing",
                       "duration_missing", "category_unknown", "nsys_runtime_end_before_start",
                       "nsys_runtime_table_missing", "nsys_string_ids_missing")


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, fl.Outcome]:
    folder = tmp_path_factory.mktemp("originals")
    return {s: fl.outcome(analyze(fl.write_original(s, folder)))
            for s in (*fl.KINETO_SCENARIOS, *fl.NSYS_SCENARIOS)}


@pytest.mark.parametrize("kind", fl.KINDS)
def test_a_broken_link_changes_nothing_without_a_note(kind: str, originals: dict[str, fl.Outcome],
                                                      tmp_path: Path) -> None:
    silent, changed = [], 0
    for scenario in fl.SCENARIOS_OF[kind]:
        for seed in SEEDS["nsys" if kind in fl.NSYS_KINDS else "kineto"]:
            path = fl.write_mangled(kind, scenario, seed, tmp_path)
            try:
                mangled = fl.outcome(analyze(path))
            except StepscopeError:
                continue  # refused with a one-line error: not a silent answer
            original = originals[scenario]
            if why := fl.silent_change(original, mangled, fl.NOTE_WORDS[kind]):
                silent.append(f"{scenario} seed {seed}: {why}")
            changed += mangled != original
    assert not silent, "\n".join(silent)
    if kind in KNOWN_SILENT_BEFORE:
        assert changed, f"{kind} changed no report in the sample: the damage did not reach what it breaks"


def test_kernels_without_correlation_leave_the_first_step_whole(tmp_path: Path) -> None:
    """The known case: every kernel's correlation removed from the CPU-bound scenario. Each step is its host range
    (3,000 µs of nms + two aten::mm of 2 + 5 + 2 µs = 3,018 µs), the first one included (it was cut by 92%, the
    unlinked kernels taken as GPU work launched before it), and the report says which field it could not use."""
    doc = fl.scenario_doc("cpu_bound")
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel":
            event["args"].pop("correlation")
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    report = analyze(path)
    assert [s.duration_us for s in report.steps] == [3018.0] * 4
    assert any("8 of 8 GPU activities" in n and "correlation" in n for n in report.notes), report.notes
