"""What is on disk in a run folder cannot crash or hang `stepscope analyze RUN_FOLDER` (issue 42, item 3): each of
its files is read only when it is a regular file of a sane size, decoded into its struct with its bounds checked,
and one that cannot be used is left out with a note naming it. The independent reason: a mangled file gives the
report the folder gives without that file at all, plus the note. A real `stepscope run` of a small CPU loop makes
the good folder once (conftest's good_run) (tests/test_fuzz_run_folder.py mangles the same one at random)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from run_folders import analyze_cli, copy  # noqa: E402
from stepscope.cli import main as cli_main  # noqa: E402
from stepscope.model.report import from_json  # noqa: E402


def edit(path: Path, change: Callable[[dict], None]) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def deep(path: Path) -> None:
    path.write_text("[" * 200_000 + "]" * 200_000)


def _steps(doc: dict, key: str, value: object) -> None:
    doc["steps"][key] = value


MANGLED: dict[str, tuple[str, Callable[[Path], None]]] = {
    "meter arrays of different lengths": ("meter.json", lambda p: edit(p, lambda d: _steps(
        d, "wall_ns", d["steps"]["wall_ns"][:5]))),
    "meter profiled with one entry": ("meter.json", lambda p: edit(p, lambda d: d.update(profiled=[20]))),
    "meter negative wall times": ("meter.json", lambda p: edit(p, lambda d: _steps(
        d, "wall_ns", [-314_000] * len(d["steps"]["wall_ns"])))),
    "meter a step of 2**70 ns": ("meter.json", lambda p: edit(p, lambda d: d["steps"]["wall_ns"].__setitem__(
        3, 2**70))),
    "meter 200,000 deep": ("meter.json", deep),
    "meter a link to /dev/zero": ("meter.json", zero),
    "census memory a list": ("census.json", lambda p: edit(p, lambda d: d.update(memory=[]))),
    "census Infinity": ("census.json", lambda p: p.write_text(p.read_text().replace("9488", "Infinity", 1))),
    "census 200,000 deep": ("census.json", deep),
    "census a FIFO": ("census.json", fifo),
    "census a link to /dev/zero": ("census.json", zero),
    "census 300 MiB (sparse)": ("census.json", lambda p: os.truncate(p, 300 << 20)),  # over the cap, never read
    "telemetry window.gpu a number": ("telemetry.json", lambda p: edit(p, lambda d: d["window"].update(gpu=5))),
    "telemetry 200,000 deep": ("telemetry.json", deep),
    "telemetry a FIFO": ("telemetry.json", fifo),
    "telemetry a link to /dev/zero": ("telemetry.json", zero),
    "calibration a string for a cost": ("calibration.json", lambda p: edit(p, lambda d: d.update(range_ns="x"))),
    "calibration a negative cost": ("calibration.json", lambda p: edit(p, lambda d: d.update(range_ns=-5))),
    "calibration 200,000 deep": ("calibration.json", deep),
    "calibration a FIFO": ("calibration.json", fifo),
    "report a negative batch": ("report.json", lambda p: edit(p, lambda d: d["run"].update(batch_size=-3))),
    "report truncated": ("report.json", lambda p: p.write_text(p.read_text()[:500])),
    "report a FIFO": ("report.json", fifo),
    "timing a FIFO": ("timing.json.gz", fifo),
}


@pytest.fixture(scope="module")
def without(good_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict]:
    """The report of the good folder with one file removed (computed once per file)."""
    made: dict[str, dict] = {}

    def report(name: str) -> dict:
        if name not in made:
            folder = copy(good_run, tmp_path_factory.mktemp("without"), "run")
            (folder / name).unlink()
            out = folder.parent / "out.json"
            assert cli_main(["analyze", str(folder), "--json", str(out)]) == 0
            made[name] = json.loads(out.read_text())
        return made[name]
    return report


@pytest.mark.parametrize("case", sorted(MANGLED))
def test_a_mangled_file_is_left_out_with_a_note(case: str, good_run: Path, without: Callable[[str], dict],
                                                tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    name, mangle = MANGLED[case]
    folder = copy(good_run, tmp_path, "run")
    mangle(folder / name)
    code, report, err = analyze_cli(folder, capfd)
    assert code == 0 and "Traceback" not in err, err
    assert report is not None
    said = [n for n in report["notes"] if n.startswith(str(folder / name))]
    assert len(said) == 1 and "left out" in said[0], report["notes"]
    if "MiB" in case:
        assert "over the 256 MiB" in said[0]
    absent = without(name)
    assert report["summary"]["step_time_us"] == absent["summary"]["step_time_us"]
    assert [p["id"] for p in report["patterns"]] == [p["id"] for p in absent["patterns"]]


def test_the_good_folder_has_no_such_note(good_run: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    folder = copy(good_run, tmp_path, "run")
    code, report, _ = analyze_cli(folder, capfd)
    assert code == 0 and report is not None
    assert not [n for n in report["notes"] if n.startswith(str(folder))]  # no file of it named
    assert report["meter"] is not None  # the meter's steps are the headline, as the run's own report says
    run = from_json((good_run / "report.json").read_bytes())
    assert report["summary"]["step_time_us"] == pytest.approx(run.summary.step_time_us)


def test_a_folder_without_report_json_is_one_run_not_two_ranks(good_run: Path, tmp_path: Path,
                                                               capfd: pytest.CaptureFixture[str]) -> None:
    folder = copy(good_run, tmp_path, "run")
    (folder / "report.json").unlink()  # a run cut short before its report
    code, report, err = analyze_cli(folder, capfd)
    assert code == 0, err
    assert report is not None and report["ranks"] == []  # it was a job of two ranks: trace and timing pass
    assert len(report["source"]["paths"]) == 1  # one trace's timeline (the timing pass's, as the run's own)
    assert report["meter"] is not None
    assert report["summary"]["step_time_us"] == pytest.approx(report["meter"]["step_us"])  # unprofiled


@pytest.mark.parametrize("how", [fifo, zero])
def test_a_trace_that_is_not_a_file_is_one_line(how: Callable[[Path], None], good_run: Path, tmp_path: Path,
                                                capfd: pytest.CaptureFixture[str]) -> None:
    folder = copy(good_run, tmp_path, "run")
    how(folder / "trace.json.gz")
    code, _, err = analyze_cli(folder, capfd)
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err
    assert lines[0].startswith(f"stepscope: error: {folder / 'trace.json.gz'}: not a regular file"), err
