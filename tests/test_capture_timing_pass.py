"""The timing pass: `stepscope run` records the steps twice, first with the cheapest settings that still link
launches to kernels (the replay's timeline), then with everything asked for (attribution); the profiler's cost
per event is measured after the window. Real runs of a small training loop on the CPU, in this process."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from test_run import TRAIN, profiler_steps, run, write  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _steps(events: list[dict]) -> list[int]:
    return sorted({int(e["name"].split("#")[1]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})


def test_the_timing_pass_comes_first_with_minimal_settings(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    script = write(tmp_path / "train.py", TRAIN)
    out = tmp_path / "run"
    code, _, err = run(capfd, "--out", out, "--record-shapes", "--skip", "3", "--warmup", "1", "--steps", "4",
                       script, "--n", "40")
    assert code == 0, err
    timing, recorded = _events(out / "timing.json.gz"), _events(out / "trace.json.gz")
    # Steps 0-2 skipped; the timing pass warms up on step 3 and records 4-7; step 8 runs unprofiled (a profiler never
    # starts in the boundary that stopped one, capture/window.py); the recorded pass warms up on 9 and records 10-13
    # (ProfilerStep#N is the program's own step number, counted from 0).
    assert _steps(timing) == [4, 5, 6, 7]
    assert [int(s.split("#")[1]) for s in profiler_steps(out)] == [10, 11, 12, 13]
    ops = [e for e in timing if e.get("cat") == "cpu_op"]
    assert ops and not any("Input Dims" in e.get("args", {}) for e in ops)  # no shapes in the timing pass
    assert any("Input Dims" in e.get("args", {}) for e in recorded if e.get("cat") == "cpu_op")
    # stepscope's line ranges (and the survey before them) belong to the recorded pass only.
    own = [e for e in timing if str(e.get("name", "")).startswith("stepscope")]
    assert not own, own[:3]
    calibration = json.loads((out / "calibration.json").read_text())
    assert calibration["record_shapes"] is False and calibration["profile_memory"] is False
    assert calibration["op_ns"] > 0 and calibration["plain_op_ns"] > 0
    # The calibration's training step records its forward operators (ten for F.linear on a CPU) and the backward's.
    assert calibration["events_per_iteration"]["op"]["op"] > 20


def test_one_pass_when_asked(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    script = write(tmp_path / "train.py", TRAIN)
    out = tmp_path / "run"
    code, _, err = run(capfd, "--out", out, "--no-timing-pass", "--skip", "3", "--warmup", "1", "--steps", "4",
                       script, "--n", "20")
    assert code == 0, err
    assert not (out / "timing.json.gz").exists()
    assert [int(s.split("#")[1]) for s in profiler_steps(out)] == [4, 5, 6, 7]
    calibration = json.loads((out / "calibration.json").read_text())
    assert calibration["record_shapes"] is True  # the costs of the trace the timeline comes from


def test_a_program_that_ends_in_the_recorded_passs_warmup_keeps_the_timing_trace(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    script = write(tmp_path / "train.py", TRAIN)
    out = tmp_path / "run"
    # Timing pass on steps 3-7, step 8 between the passes, the recorded pass warms up on step 9, and the program
    # ends after it (10 steps).
    code, _, err = run(capfd, "--out", out, "--skip", "3", "--warmup", "1", "--steps", "4", script, "--n", "10")
    assert code == 0, err
    assert [int(s.split("#")[1]) for s in profiler_steps(out)] == [4, 5, 6, 7]
    assert not (out / "timing.json.gz").exists()  # the timing trace is the run's only trace
    assert json.loads((out / "calibration.json").read_text())["record_shapes"] is False  # measured at the end
    # The report says what is missing and why: the window was 1 + 4 steps twice and one between (11); the program
    # ran 7 of them.
    notes = json.loads((out / "report.json").read_text())["notes"]
    assert any("ended 4 step(s) before the recorded pass could finish" in n and "--no-timing-pass" in n
               for n in notes), notes


def test_a_program_that_ends_in_the_step_between_the_passes_keeps_the_timing_trace(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The timing pass ends with step 7, the program's last: the recorded pass, due to start at the end of step 8,
    never does (the session closes a window waiting between its passes), and the timing trace is the run's,
    calibrated at the end."""
    script = write(tmp_path / "train.py", TRAIN)
    out = tmp_path / "run"
    code, _, err = run(capfd, "--out", out, "--skip", "3", "--warmup", "1", "--steps", "4", script, "--n", "8")
    assert code == 0, err
    assert [int(s.split("#")[1]) for s in profiler_steps(out)] == [4, 5, 6, 7]
    assert not (out / "timing.json.gz").exists()
    assert json.loads((out / "calibration.json").read_text())["record_shapes"] is False
    # The window: 5 timing boundaries, 1 to start the recorded pass, 5 of it (11); the program ran the first 5.
    notes = json.loads((out / "report.json").read_text())["notes"]
    assert any("ended 6 step(s) before the recorded pass could finish" in n for n in notes), notes


@pytest.mark.parametrize("reference", ["0", "5"])
def test_the_meter_sees_the_steps_after_the_window_as_unprofiled(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], reference: str) -> None:
    """The calibration runs at the boundary after the window, or, when nothing is left to mark one (`--full` with no
    reference steps: the step hooks go with the capture), once the program has ended. Either way the meter's profiled
    steps end where the window and the calibration did: the program's 40 steps go on unprofiled after them, and the
    meter counts them as steps after the window (a calibration left to the end once marked them all profiled)."""
    script = write(tmp_path / "train.py", TRAIN)
    out = tmp_path / "run"
    code, _, err = run(capfd, "--out", out, "--full", "--reference-steps", reference, "--skip", "3", "--warmup", "0",
                       "--steps", "2", script, "--n", "40")
    assert code == 0, err
    meter = json.loads((out / "meter.json").read_text())
    first, last = meter["profiled"]
    # Steps 3-4 timing, 5 between, 6-7 recorded; the calibration at the end of step 8 (the settle step), or after 40.
    assert first <= 4 and last <= 10, meter["profiled"]
    assert (out / "calibration.json").exists()
