"""The Python API: `with stepscope.profile(...) as p:` / `p.step()` / `p.report`, on the CPU; and the one set
of capture defaults behind the API, the CLI and the callbacks."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from stepscope.api import profile, step  # noqa: E402
from stepscope.capture.options import DEFAULTS, CaptureOptions  # noqa: E402
from stepscope.capture.session import active  # noqa: E402
from stepscope.errors import StepscopeError  # noqa: E402
from stepscope.model.report import Report, from_json, to_json  # noqa: E402


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the default run folder, stepscope-runs/, is made in the working folder


def train(n: int, mark: object) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(n):
        x = torch.randn(8, 16)
        torch.nn.functional.cross_entropy(model(x), torch.randint(0, 2, (8,))).backward()
        opt.step()
        mark()  # type: ignore[operator]


def test_profile_gives_the_same_report_object(tmp_path: Path) -> None:
    # 2 skipped, the timing pass's 1 + 3, one step between the passes, the recorded pass's 1 + 3: 11 steps.
    with profile(skip=2, warmup=1, steps=3, batch_size=8, telemetry=False) as p:
        train(11, p.step)
    assert active() is None and p.done
    report = p.report
    assert isinstance(report, Report) and report is p.report  # analysed once
    assert [s.id for s in report.steps] == ["3", "4", "5"]
    assert report.summary.samples_per_s == pytest.approx(8 * report.summary.steps_per_s, rel=1e-3)
    assert report.run is not None and report.run.step_source == "manual" and report.run.exit_code is None
    assert report.run.status == "window recorded" and report.run.batch_size_source == "user"
    assert from_json(to_json(report)).run == report.run  # the run section round-trips
    # No out=: a new run folder under the working folder, as `stepscope run` makes.
    assert p.trace_path is not None and p.trace_path.name == "trace.json.gz"
    assert p.trace_path.resolve().parent.parent == tmp_path.resolve() / "stepscope-runs"


def test_module_level_step_marks_the_active_profile(tmp_path: Path) -> None:
    step()  # nothing active: does nothing
    with profile(skip=0, warmup=0, steps=2, out=tmp_path / "trace", telemetry=True) as p:
        train(5, step)
    assert (tmp_path / "trace" / "trace.json.gz").is_file()
    assert [s.id for s in p.report.steps] == ["0", "1"]
    assert p.telemetry is not None and p.report.run is not None and p.report.run.telemetry is not None


def test_an_earlier_trace_is_never_overwritten_silently(tmp_path: Path) -> None:
    out = tmp_path / "kept"
    with profile(skip=0, warmup=0, steps=2, out=out, telemetry=False) as p:
        train(3, p.step)
    before = (out / "trace.json.gz").read_bytes()
    with pytest.raises(StepscopeError, match="already exists"):
        profile(skip=0, warmup=0, steps=2, out=out).start()
    assert (out / "trace.json.gz").read_bytes() == before
    with profile(skip=0, warmup=0, steps=3, out=out, force=True, telemetry=False) as again:  # asked for
        train(4, again.step)
    assert [s.id for s in again.report.steps] == ["0", "1", "2"]


def test_too_few_steps_is_said_plainly() -> None:
    with profile(skip=5, warmup=2, steps=5, telemetry=False) as p:
        train(3, p.step)
    with pytest.raises(StepscopeError, match=r"ran 3 steps .*needs at least 8"):
        _ = p.report


def test_leaving_early_keeps_the_recorded_steps() -> None:
    with pytest.raises(RuntimeError), profile(skip=1, warmup=1, steps=10, telemetry=False) as p:
        train(6, p.step)
        raise RuntimeError("the loop failed")
    assert [s.id for s in p.report.steps] == ["2", "3", "4", "5"]
    assert p.report.run is not None and p.report.run.status == "ended early"


def test_one_set_of_defaults_for_the_api_the_cli_and_the_callbacks() -> None:
    """profile()'s typed keyword defaults, `stepscope run`'s flags and the callbacks' options all come from
    CaptureOptions (telemetry used to be on in the CLI and off in the API)."""
    from stepscope.cli import build_parser
    from stepscope.commands.run import options_from_args
    from stepscope.integrations._common import CallbackOptions

    params = inspect.signature(profile).parameters
    fields = {f.name: f.default for f in dataclasses.fields(CaptureOptions)}
    shared = set(params) & set(fields)
    assert shared >= {"skip", "warmup", "steps", "batch_size", "telemetry", "attribution", "profile_memory"}
    # skip=None: the default number, then more while the steps settle (a number given is exact, as in the CLI)
    assert params["skip"].default is None
    typed = shared - {"skip"}
    assert {name: params[name].default for name in typed} == {name: fields[name] for name in typed}
    assert profile().spec == DEFAULTS.replace(step_on="marker")
    assert profile(skip=10).spec == DEFAULTS.replace(step_on="marker", settle=False)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY and p.annotation != inspect.Parameter.empty
               for p in params.values())
    cli = options_from_args(build_parser("run").parse_args(["run", "train.py"]))
    assert cli == DEFAULTS
    assert CallbackOptions.from_kwargs().capture == DEFAULTS.replace(step_on="marker")
    with pytest.raises(TypeError, match="unknown stepscope callback option"):
        CallbackOptions.from_kwargs(skipp=3)


def test_hooks_find_the_steps_with_no_step_calls() -> None:
    """hooks=True: the optimizer steps are the steps, found as `stepscope run` finds them, and the hooks go at the
    end (the DataLoader's __next__ and the optimizer's step hooks as they were)."""
    from torch.optim.optimizer import _global_optimizer_post_hooks
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    before = (_BaseDataLoaderIter.__next__, torch.autograd.backward, len(_global_optimizer_post_hooks))
    with profile(hooks=True, skip=2, warmup=1, steps=3, telemetry=False) as p:
        train(20, lambda: None)  # 20 optimizer steps, no step call: 2 skipped, 1 + 3 twice, the reference
    run = p.report.run
    # Step 3 (from 0) is the first recorded: after 2 skipped and 1 warm-up.
    assert run is not None and (run.step_source, run.steps_recorded, run.first_recorded_step) == ("optimizer", 3, 3)
    assert (_BaseDataLoaderIter.__next__, torch.autograd.backward, len(_global_optimizer_post_hooks)) == before
