"""Fuzz, beside the trace fuzz (test_fuzz.py, test_bad_input.py): a good run folder's files mangled at random
(wrong types, huge numbers, NaN and Infinity, deep nesting, truncation, FIFOs, links to /dev/zero), and `stepscope
analyze` on it must end with a report (exit 0) or a one-line error (exit 2), never a traceback, never a hang.
Seeded (derandomized) and bounded: a few dozen cases, each analyze well under a second here."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")

from run_folders import analyze_cli, copy

FILES = ("meter.json", "census.json", "telemetry.json", "calibration.json", "report.json")
CASES = 30

VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**80, 2**80), st.sampled_from([2**63, -1, 0, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.lists(st.integers(-5, 5), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def _nodes(value: Any, path: tuple = ()) -> list[tuple]:
    """Every place in a JSON document: the key paths to its values."""
    found = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            found += _nodes(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:6]):  # the first few entries of long arrays are enough
            found += _nodes(v, (*path, i))
    return found


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


def mangle(data: st.DataObject, path: Path) -> None:
    action = data.draw(st.sampled_from(["set", "set", "set", "delete", "truncate", "deep", "fifo", "zero",
                                        "nan", "garbage"]))
    if action in ("fifo", "zero"):
        path.unlink(missing_ok=True)
        os.mkfifo(path) if action == "fifo" else path.symlink_to("/dev/zero")
        return
    if not path.is_file():
        return  # made a FIFO by an earlier mangling
    text = path.read_text()
    if action == "truncate":
        path.write_text(text[:data.draw(st.integers(0, max(len(text) - 1, 0)))])
    elif action == "deep":
        depth = data.draw(st.sampled_from([1000, 200_000]))
        path.write_text('{"schema": ' + "[" * depth + "]" * depth + "}")
    elif action == "garbage":
        path.write_bytes(data.draw(st.binary(max_size=64)))
    elif action == "nan":
        path.write_text(text.replace("0.", "NaN" if data.draw(st.booleans()) else "-Infinity", 1))
    else:
        doc = json.loads(text)
        where = data.draw(st.sampled_from(_nodes(doc)))
        if action == "delete" and where:
            _set(doc, where[:-1], _drop(_get(doc, where[:-1]), where[-1]))
        else:
            doc = _set(doc, where, data.draw(VALUES))
        path.write_text(json.dumps(doc))  # NaN and Infinity are written as JSON's (invalid) literals


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _drop(container: Any, key: Any) -> Any:
    if isinstance(container, dict):
        container.pop(key, None)
    elif isinstance(container, list) and key < len(container):
        del container[key]
    return container


@settings(max_examples=CASES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_mangled_run_folders_give_a_report_or_one_line(data: st.DataObject, good_run: Path,
                                                       tmp_path_factory: pytest.TempPathFactory,
                                                       capfd: pytest.CaptureFixture[str]) -> None:
    folder = copy(good_run, tmp_path_factory.mktemp("mangled"))
    for _ in range(data.draw(st.integers(1, 3))):
        mangle(data, folder / data.draw(st.sampled_from(FILES)))
    code, report, err = analyze_cli(folder, capfd)
    assert "Traceback" not in err, err
    assert code in (0, 2), err
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines[0].startswith("stepscope: error: ") and len(lines) <= 2, err  # the error, and a hint
    else:
        assert report is not None and report["summary"]["step_count"] >= 1
