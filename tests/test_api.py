"""The Python API: `with stepscope.profile(...) as p:` / `p.step()` / `p.report`, on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from stepscope.api import Profile, profile, step  # noqa: E402
from stepscope.capture.session import active  # noqa: E402
from stepscope.errors import StepscopeError  # noqa: E402
from stepscope.model.report import Report, from_json, to_json  # noqa: E402


def train(n: int, mark: object) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(n):
        x = torch.randn(8, 16)
        torch.nn.functional.cross_entropy(model(x), torch.randint(0, 2, (8,))).backward()
        opt.step()
        mark()  # type: ignore[operator]


def test_profile_gives_the_same_report_object() -> None:
    with profile(skip=2, warmup=1, steps=3, batch_size=8) as p:
        train(10, p.step)
    assert active() is None and p.done
    report = p.report
    assert isinstance(report, Report) and report is p.report  # analysed once
    assert [s.id for s in report.steps] == ["3", "4", "5"]
    assert report.summary.samples_per_s == pytest.approx(8 * report.summary.steps_per_s, rel=1e-3)
    assert report.run is not None and report.run.step_source == "manual" and report.run.exit_code is None
    assert report.run.status == "window recorded" and report.run.batch_size_source == "user"
    assert from_json(to_json(report)).run == report.run  # the run section round-trips
    assert p.trace_path is not None and p.trace_path.name == "trace.json.gz"


def test_module_level_step_marks_the_active_profile(tmp_path: Path) -> None:
    step()  # nothing active: does nothing
    with Profile(skip=0, warmup=0, steps=2, out=tmp_path / "trace", telemetry=True) as p:
        train(5, step)
    assert (tmp_path / "trace" / "trace.json.gz").is_file()
    assert [s.id for s in p.report.steps] == ["0", "1"]
    assert p.telemetry is not None and p.report.run is not None and p.report.run.telemetry is not None


def test_too_few_steps_is_said_plainly() -> None:
    with profile(skip=5, warmup=2, steps=5) as p:
        train(3, p.step)
    with pytest.raises(StepscopeError, match=r"ran 3 steps .*needs at least 8"):
        _ = p.report


def test_leaving_early_keeps_the_recorded_steps() -> None:
    with pytest.raises(RuntimeError), profile(skip=1, warmup=1, steps=10) as p:
        train(6, p.step)
        raise RuntimeError("the loop failed")
    assert [s.id for s in p.report.steps] == ["2", "3", "4", "5"]
    assert p.report.run is not None and p.report.run.status == "ended early"
