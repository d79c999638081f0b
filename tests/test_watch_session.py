"""The watch session's bookkeeping, driven by engine events with hand-built results (no capture): the first good
run is the baseline, a failed run keeps the last good one on show, pinning makes the current run the baseline,
a measurement stands beside the predictions of the run it was made against, and listeners hear every change."""

from __future__ import annotations

from pathlib import Path

from stepscope.live.engine import Finished, Result, Started, Target
from stepscope.live.watch import BatchFlag, WatchSession
from test_live_compare import line, report


def session(tmp_path: Path) -> WatchSession:
    return WatchSession(Target(("train.py", "--batch-size", "16"), tmp_path), tmp_path / "work",
                        script=tmp_path / "train.py", batch_flag=BatchFlag("--batch-size"), polling=True)


def finish(s: WatchSession, run_id: int, forward_us: float | None, error: str | None = None) -> None:
    rep = None if forward_us is None else report([90, 100, 110], [line(15, forward_us)], samples_per_s=16e4)
    s._on_event(Started(run_id, ()))
    s._on_event(Finished(run_id, Result(run_id, Path("f"), rep, error, 0.0, None, 1.0)))


def test_baseline_previous_failure_and_pin(tmp_path: Path) -> None:
    s = session(tmp_path)
    versions: list[int] = []
    s.listen(versions.append)
    finish(s, 1, 100.0)
    finish(s, 2, 300.0)
    view = s.snapshot()
    assert view["baseline_run"] == 1 and view["result"]["run_id"] == 2
    fwd = view["changes"]["lines"][0]["since_previous"]["forward_us"]
    assert (fwd["before"], fwd["after"], fwd["beyond_noise"]) == (100.0, 300.0, True)
    finish(s, 3, None, error="ValueError: planted")
    view = s.snapshot()
    assert view["result"]["run_id"] == 2 and view["error"] == {"run_id": 3, "text": "ValueError: planted"}
    s.pin()
    view = s.snapshot()
    assert view["baseline_run"] == 2 and view["changes"]["lines"][0]["since_baseline"] == {}
    finish(s, 4, 310.0)
    view = s.snapshot()
    assert view["error"] is None and view["baseline_run"] == 2
    assert view["changes"]["lines"][0]["since_baseline"]["forward_us"]["before"] == 300.0
    assert versions == sorted(versions) and len(versions) == 9  # two events per run, and the pin


def test_a_measurement_belongs_to_the_run_it_was_made_against(tmp_path: Path) -> None:
    s = session(tmp_path)
    finish(s, 1, 100.0)
    s.measurer.submit = lambda: 1  # type: ignore[method-assign]  # no capture: the result is handed in below
    assert s.measure(64) is None
    assert s.measurer.target.argv == ("train.py", "--batch-size", "64")
    rows = {r["batch_size"]: r for r in s.snapshot()["batch"]["rows"]}
    assert rows[16]["current"] and rows[64]["measured"]["state"] == "running"
    measured = report([200, 200, 200], [], samples_per_s=64 * 5000.0)
    s._on_measure(Finished(1, Result(1, Path("m"), measured, None, 0.0, None, 1.0)))
    rows = {r["batch_size"]: r for r in s.snapshot()["batch"]["rows"]}
    assert rows[64]["measured"]["state"] == "measured" and rows[64]["measured"]["step_us"] == 200.0
    finish(s, 2, 150.0)  # the code changed: the measurement no longer stands beside its predictions
    assert all(r["measured"] is None for r in s.snapshot()["batch"]["rows"])
    s.batch_flag = None
    assert "not settable" in (s.measure(64) or "")


def test_run_folders_nobody_shows_are_removed(tmp_path: Path) -> None:
    s = session(tmp_path)
    runs = tmp_path / "work" / "runs"
    for n in range(1, 5):
        (runs / f"run-{n}").mkdir(parents=True, exist_ok=True)
        (runs / f"run-{n}" / "report.json").write_text("{}")
        (runs / f"run-{n}.output.log").write_text("")
    for n in (1, 2, 3, 4):
        finish(s, n, 100.0 + n)
    # shown: run 4 (current), 3 (previous), 1 (baseline); run 2 is nobody's any more
    assert sorted(p.name for p in runs.iterdir()) == ["run-1", "run-1.output.log", "run-3", "run-3.output.log",
                                                        "run-4", "run-4.output.log"]
