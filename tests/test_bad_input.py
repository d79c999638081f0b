"""Bad input gets a one-line error naming the file, exit code 2, no traceback."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builder import TraceBuilder
from stepscope.errors import StepscopeError
from stepscope.pipeline import analyze

CASES = {
    "empty.json": b"",
    "truncated.json.gz": gzip.compress(b'{"traceEvents": []}' * 500)[:200],
    "invalid.json": b'{"traceEvents": [{"ph": "X",',
    "execution_trace.json": b'{"schema": "1.0.1", "pid": 7, "nodes": [{"id": 1, "name": "[pytorch|profiler]"}]}',
    "no_events.json": b'{"traceEvents": []}',
    "text.json": b"hello, world",
    "object.json": b'{"foo": 1}',
    "nested.json": b'{"traceEvents": [{"ph": "X", "args": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]}",
    "random.sqlite": bytes(range(256)) * 8,
    "gzip_trace_named.txt": gzip.compress(b'{"traceEvents": []}'),  # a .txt is a list of traces, unless binary
    "json_trace_named.txt": b'{"traceEvents": 3}',  # ... or JSON: read as a trace, and refused as one
    "long_line_list.txt": b"x" * 5000 + b"\n",  # a line no file system takes as a name
    "missing_entry_list.txt": b"# one trace\nnot_there.json.gz\n",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_bad_file(name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_bytes(CASES[name])
    done = subprocess.run([sys.executable, "-m", "stepscope", "analyze", str(path)], capture_output=True, text=True)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith(f"stepscope: error: {path}: ")
    assert "Traceback" not in done.stderr and len(lines) <= 2
    assert done.stderr.isprintable() or all(c.isprintable() or c == "\n" for c in done.stderr)


def test_a_json_trace_named_txt_is_read_as_the_trace(tmp_path: Path) -> None:
    """.txt names a list of traces; a file whose content is a JSON trace is that trace, whatever its name."""
    events = _base_events()
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": events}))
    (tmp_path / "t.txt").write_text(json.dumps({"traceEvents": events}))
    as_json, as_txt = (json.loads(subprocess.run(
        [sys.executable, "-m", "stepscope", "analyze", "--json", "-", str(tmp_path / name)],
        capture_output=True, text=True, check=True).stdout) for name in ("t.json", "t.txt"))
    assert [s["id"] for s in as_txt["steps"]] == ["0", "1", "2"]
    assert as_txt["steps"] == as_json["steps"]


def test_perfetto_of_a_bare_event_list(tmp_path: Path) -> None:
    """A trace whose top level is the event list (which analyze accepts) is annotated like any other."""
    events = _base_events()
    (tmp_path / "t.json").write_text(json.dumps(events))
    out = tmp_path / "annotated.json"
    done = subprocess.run([sys.executable, "-m", "stepscope", "analyze", "-q", str(tmp_path / "t.json"),
                           "--perfetto", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    written = json.loads(out.read_bytes())["traceEvents"]
    assert written[: len(events)] == events and len(written) > len(events)


def test_cli_missing_path_and_empty_folder(tmp_path: Path) -> None:
    for target in (tmp_path / "nope.json", tmp_path):
        done = subprocess.run([sys.executable, "-m", "stepscope", "analyze", str(target)],
                              capture_output=True, text=True)
        assert done.returncode == 2 and str(target) in done.stderr and "Traceback" not in done.stderr


def _base_events() -> list[dict]:
    b = TraceBuilder()
    for i in range(3):
        t = i * 100.0
        b.step(i, t, t + 100)
        b.dataloader(t, t + 10)
        b.launch("gemm", (t + 20, t + 25), (t + 30, t + 60))
        b.copy("HtoD", (t + 61, t + 62), (t + 63, t + 70), nbytes=4096)
        b.runtime("cudaStreamSynchronize", t + 71, t + 80)
    return b.to_dict()["traceEvents"]


_VALUES = st.one_of(st.none(), st.integers(-10**6, 10**12), st.floats(allow_nan=False), st.text(max_size=6),
                    st.booleans(), st.lists(st.integers(), max_size=2))
_KEYS = st.sampled_from(["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"])
_ARG_KEYS = st.sampled_from(["correlation", "device", "stream", "bytes", "External id", "Sequence number"])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mangled_traces_analyse_or_fail_cleanly(data: st.DataObject, tmp_path: Path) -> None:
    """Property: whatever the damage, the reader either analyses the trace or raises StepscopeError."""
    events = _base_events()
    for _ in range(data.draw(st.integers(1, 8))):
        victim = events[data.draw(st.integers(0, len(events) - 1))]
        action = data.draw(st.sampled_from(["set", "delete", "arg", "drop_args"]))
        if action == "set":
            victim[data.draw(_KEYS)] = data.draw(_VALUES)
        elif action == "delete":
            victim.pop(data.draw(_KEYS), None)
        elif action == "arg" and isinstance(victim.get("args"), dict):
            victim["args"][data.draw(_ARG_KEYS)] = data.draw(_VALUES)
        else:
            victim.pop("args", None)
    raw = json.dumps({"traceEvents": events}).encode()
    cut = data.draw(st.sampled_from([None, "truncate", "gzip-truncate"]))
    if cut == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    path = tmp_path / ("t.json.gz" if cut == "gzip-truncate" else "t.json")
    if cut == "gzip-truncate":
        packed = gzip.compress(raw)
        raw = packed[: data.draw(st.integers(0, len(packed) - 1))]
    path.write_bytes(raw)
    try:
        report = analyze(path)
    except StepscopeError as exc:
        assert str(exc).startswith(str(path))
    else:
        assert report.summary.step_count >= 1


# -- messages that say what is wrong -------------------------------------------------------------------------


def test_report_on_a_run_folder_with_a_truncated_report(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "report.json").write_bytes(b'{"schema": "stepscope.report/1", "steps": [{"id"')
    done = subprocess.run([sys.executable, "-m", "stepscope", "report", str(folder)], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"stepscope: error: {folder / 'report.json'}: not a readable stepscope report "
                                  "(not valid JSON: it ends early")


def test_fail_if_slower_refuses_nan(tmp_path: Path) -> None:
    for value in ("nan", "inf", "-1"):
        done = subprocess.run([sys.executable, "-m", "stepscope", "diff", "a", "b", "--fail-if-slower", value],
                              capture_output=True, text=True)
        assert done.returncode == 2 and "not a percentage of 0 or more" in done.stderr, value


def test_out_naming_a_file_says_so(tmp_path: Path) -> None:
    from stepscope.capture.runfolder import new_run_folder

    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(StepscopeError, match="is a file; --out names the folder"):
        new_run_folder("train", tmp_path / "notes.txt")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_unwritable_working_folder_hints_at_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from stepscope.capture import runfolder

    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(StepscopeError) as caught:
        runfolder.new_run_folder("train", base=tmp_path / "stepscope-runs")
    assert "cannot create the run folder (Permission denied)" in caught.value.message
    assert caught.value.hint is not None and "--out" in caught.value.hint


# -- the CLI never hides a verb ----------------------------------------------------------------------------


def test_every_verb_imports() -> None:
    import importlib

    from stepscope.cli import VERBS

    for verb in VERBS:
        assert callable(importlib.import_module(f"stepscope.commands.{verb}").add_parser)


def test_a_broken_verb_is_listed_and_says_why(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from stepscope import cli

    real = cli._verb_module

    def broken_diff(name: str):
        if name == "diff":
            raise ImportError("cannot import name 'compare' from 'stepscope.compare'")
        return real(name)

    monkeypatch.setattr(cli, "_verb_module", broken_diff)
    assert "diff" in cli.build_parser().format_help() and "cannot load" in cli.build_parser("diff").format_help()
    assert cli.main(["diff", "a.json", "b.json"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stepscope: error: the diff command cannot load (ImportError: cannot import name")
    assert "Traceback" not in err


@pytest.mark.parametrize(("verb", "option", "value"), [
    ("analyze", "--batch-size", "-3"), ("analyze", "--batch-size", "0"), ("diff", "--batch-size", "-1"),
    ("analyze", "--width", "0"), ("report", "--width", "-80")])
def test_counts_below_one_are_refused(verb: str, option: str, value: str) -> None:
    """A batch of -3 samples printed 'samples/s -77.9'; one of 0 dropped samples/s without a word."""
    trace = str(Path(__file__).parent / "data" / "gpu_h100" / "input_bound" / "trace.json.gz")
    paths = {"analyze": [trace], "diff": [trace, trace], "report": [trace]}[verb]
    done = subprocess.run([sys.executable, "-m", "stepscope", verb, *paths, f"{option}={value}"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and f"argument {option}: must be 1 or more" in done.stderr


def test_analyze_on_a_run_folder_reads_its_trace_with_its_batch_size(tmp_path: Path) -> None:
    """A run folder holds its trace beside report.json, telemetry.json and census.json: analysed as the one trace
    (these were taken for three failed ranks), with the batch size the capture found."""
    import shutil

    from stepscope.model.report import Run, to_json
    from stepscope.pipeline import analyze
    from stepscope.trace.kineto import read_kineto

    source = Path(__file__).parent / "data" / "gpu_h100" / "launch_bound"
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(source / "trace.json.gz", folder / "trace.json.gz")
    shutil.copy(source / "telemetry.json", folder / "telemetry.json")
    (folder / "census.json").write_text('{"schema": "stepscope.census/1"}')
    doc = json.loads((source / "run.json").read_text())
    run = msgspec.convert({k: v for k, v in doc.items() if k in Run.__struct_fields__ and k != "energy_per_step"},
                          Run)
    (folder / "report.json").write_bytes(to_json(analyze([read_kineto(folder / "trace.json.gz")], run=run)))
    done = subprocess.run([sys.executable, "-m", "stepscope", "analyze", str(folder), "--json", "-", "-q"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "rank" not in done.stderr, done.stderr
    summary = json.loads(done.stdout)["summary"]
    batch = doc.get("samples_per_step") or doc["batch_size"]
    assert summary["samples_per_s"] == pytest.approx(summary["steps_per_s"] * batch, rel=1e-3)


def test_an_unknown_option_is_told_with_the_verbs_own_usage() -> None:
    done = subprocess.run([sys.executable, "-m", "stepscope", "analyze", "x.json", "--bogus"], capture_output=True,
                          text=True)
    assert done.returncode == 2 and "usage: stepscope analyze" in done.stderr
    assert done.stderr.strip().endswith("stepscope analyze: error: unrecognized arguments: --bogus")
