"""What `watch` watches (the script, the local modules beside it, the files the report names) and the two watcher
backends: a write to a watched module is reported, a write to any other file is not. And the step meter's first
figures from a hand-made meter.json."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import msgspec
import pytest

from live_scripts import wait_for
from stepscope.live import files
from stepscope.live.engine import meter_figures
from stepscope.model import report as s


def project(root: Path) -> Path:
    (root / "pkg").mkdir()
    (root / ".hidden").mkdir()
    (root / "venv").mkdir()
    (root / "venv" / "pyvenv.cfg").write_text("home = /usr\n")
    (root / "__pycache__").mkdir()
    for name in ("train.py", "helper.py", "pkg/__init__.py", "pkg/model.py", ".hidden/x.py", "venv/site.py",
                 "__pycache__/train.py", "notes.txt"):
        (root / name).write_text("# v1\n")
    return root / "train.py"


def test_the_local_modules_leave_out_environments_and_hidden_folders(tmp_path: Path) -> None:
    script = project(tmp_path)
    found = files.watched_files(script, tmp_path, None)
    assert found == {(tmp_path / n).resolve() for n in ("train.py", "helper.py", "pkg/__init__.py", "pkg/model.py")}


def test_files_the_report_names_are_watched_wherever_they_are(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    script = project(tmp_path / "proj")
    elsewhere = tmp_path / "lib" / "mylib"
    elsewhere.mkdir(parents=True)
    (elsewhere / "layers.py").write_text("# v1\n")
    row = s.LineCost(file=str(elsewhere / "layers.py"), line=3, label="layers.py:3", cpu_fwd_us=1.0, cpu_bwd_us=0.0,
                     gpu_fwd_us=0.0, gpu_bwd_us=0.0, kernels=0.0, share=0.1)
    report = s.Report(source=s.Source(paths=[], format="live"), device=None, steps=[],
                      summary=s.Summary(step_time_us=1.0, breakdown_us={}, gpu_utilization=None),
                      lines=s.Lines(source="", granularity="line", attributed_share=1.0, rows=[row]))
    assert (elsewhere / "layers.py").resolve() in files.watched_files(script, tmp_path / "proj", report)
    # watchfiles is given the fewest folders: proj/pkg is watched through proj
    proj = tmp_path / "proj"
    folders = files._folders({elsewhere / "layers.py", proj / "train.py", proj / "pkg" / "m.py"})
    assert sorted(folders) == sorted([elsewhere, proj])


@pytest.mark.parametrize("polling", [True, False], ids=["polling", "watchfiles"])
def test_a_save_of_a_watched_module_is_reported_and_others_are_not(tmp_path: Path, polling: bool) -> None:
    if not polling and files.watchfiles is None:
        pytest.skip("watchfiles is not installed")
    script = project(tmp_path)
    seen: list[Path] = []
    got = threading.Event()
    watcher = files.FileWatcher(lambda: files.watched_files(script, tmp_path, None),
                                lambda p: (seen.append(p), got.set()), polling=polling).start()
    try:
        assert watcher.backend == ("polling" if polling else "watchfiles")
        time.sleep(0.6)  # the watcher has taken its first look
        for name in ("notes.txt", ".hidden/x.py", "venv/site.py"):
            (tmp_path / name).write_text("# v2, longer\n")
        time.sleep(1.0)
        assert not seen, seen
        (tmp_path / "pkg" / "model.py").write_text("# v2, longer\n")
        wait_for(got.is_set, 5, "the save to be reported")
        assert {p.resolve() for p in seen} == {(tmp_path / "pkg" / "model.py").resolve()}
    finally:
        watcher.stop()


def test_first_figures_from_the_step_meter(tmp_path: Path) -> None:
    # Steps 0..6: step 0 is the start-up (50 ms) and steps 4-5 were profiled (30 ms): both left out. The other
    # four: wall 12, 10, 9, 10 ms -> median (upper) 10 ms; forward 4 ms each; backward 5, 5, 4, 6 -> 5 ms; batch 32:
    # 32 / 10 ms = 3200 samples/s; the rest (1 ms) is "other"; device_ns is not a phase.
    ms = 1_000_000
    meter = {"schema": "stepscope.meter/1", "source": "optimizer", "batch_size": 32, "done": False,
             "profiled": [4, 5],
             "steps": {"first_step": 0, "end_ns": list(range(7)), "data_ns": [0] * 7, "optimizer_ns": [0] * 7,
                       "wall_ns": [50 * ms, 12 * ms, 10 * ms, 9 * ms, 30 * ms, 30 * ms, 10 * ms],
                       "forward_ns": [40 * ms, 4 * ms, 4 * ms, 4 * ms, 20 * ms, 20 * ms, 4 * ms],
                       "backward_ns": [1 * ms, 5 * ms, 5 * ms, 4 * ms, 9 * ms, 9 * ms, 6 * ms],
                       "device_ns": [-1] * 7}}
    path = tmp_path / "meter.json"
    assert meter_figures(7, path) is None  # not there yet
    path.write_bytes(msgspec.json.encode(meter))
    figures = meter_figures(7, path)
    assert figures is not None and figures.run_id == 7 and figures.source == "meter"
    assert figures.step_ms == pytest.approx(10.0) and figures.samples_per_s == pytest.approx(3200.0)
    assert figures.phases == pytest.approx({"forward": 0.4, "backward": 0.5, "other": 0.1})
    only_start = {**meter, "profiled": None, "steps": {k: v[:1] if isinstance(v, list) else v
                                                       for k, v in meter["steps"].items()}}
    path.write_bytes(msgspec.json.encode(only_start))
    assert meter_figures(7, path) is None  # only the start-up step so far
    path.write_bytes(msgspec.json.encode(meter)[:-20])
    assert meter_figures(7, path) is None  # caught half-written: not a figure
    path.write_bytes(msgspec.json.encode({**meter, "steps": {**meter["steps"], "wall_ns": [-1] * 7}}))
    assert meter_figures(7, path) is None  # refused by the meter's own check (a negative time)
