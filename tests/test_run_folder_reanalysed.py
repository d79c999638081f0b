"""`stepscope analyze RUN_FOLDER` gives the report `stepscope run` gave: the same timeline (the timing trace replayed
without the profiler's calibrated cost), the same headline (the run's unprofiled step), the same verdict and
figures. A real run of a small training loop on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from stepscope.model.report import from_json  # noqa: E402
from stepscope.pipeline import analyze  # noqa: E402
from test_run import TRAIN, run, write  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_analyze_of_the_run_folder_is_the_runs_report(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    script = write(tmp_path / "train.py", TRAIN)
    out = tmp_path / "run"
    code, _, err = run(capfd, "--out", out, script)
    assert code == 0, err
    live = from_json((out / "report.json").read_bytes())
    again = analyze(out)
    assert live.replay is not None and live.replay.replayed  # the run's timeline is the replayed one
    assert again.replay == live.replay
    assert again.summary == live.summary  # the unprofiled headline, the replayed steps' breakdown
    assert [s.id for s in again.steps] == [s.id for s in live.steps]
    assert [(p.id, p.share) for p in again.patterns] == [(p.id, p.share) for p in live.patterns]
    # The advice knows what the program had set, as the run's did (it said "a trace alone does not say torch's
    # thread count" for cpu_threads, and lost the settings-based fixes)
    assert [(r.id, r.estimated_speedup) for r in again.recommendations] == [
        (r.id, r.estimated_speedup) for r in live.recommendations]
    assert [(c.id, c.reason) for c in again.considered] == [(c.id, c.reason) for c in live.considered]
    assert again.run is None  # the run section is the live capture's alone
