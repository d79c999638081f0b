"""`stepscope diff` compares like with like (issue 30, item 9): a run folder's step is measured without the profiler,
a trace's as the profiler recorded it. Diffing a run against its own recorded trace once claimed a speed-up of
several times (the profiler's own cost); the same run on both sides can be no faster than itself."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from stepscope.cli import main as cli_main  # noqa: E402

TRAIN = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(40):
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("diff_basis")
    script = base / "train.py"
    script.write_text(textwrap.dedent(TRAIN))
    folder = base / "run"
    code = cli_main(["run", "--out", str(folder), "--skip", "2", "--warmup", "1", "--steps", "3", str(script)])
    assert code == 0 and (folder / "trace.json.gz").is_file()
    return folder


def test_a_run_against_its_own_trace_claims_no_speedup(run_folder: Path, tmp_path: Path,
                                                       capfd: pytest.CaptureFixture[str]) -> None:
    capfd.readouterr()
    out_json = tmp_path / "diff.json"
    code = cli_main(["diff", str(run_folder / "trace.json.gz"), str(run_folder), "--json", str(out_json),
                     "--width", "200"])
    out = capfd.readouterr().out
    assert code == 0
    verdict = out.splitlines()[2]  # after the before: and after: lines
    assert verdict.startswith("Not comparable: BEFORE is the recorded trace of the run AFTER")
    assert "faster" not in out and "slower" not in out
    diff = json.loads(out_json.read_text())
    assert diff["speedup"] is None and diff["headline_speedup"] is None and diff["throughput_ratio"] is None
    assert "measured without the profiler" in diff["mismatch"]


def test_the_gate_refuses_to_compare_a_run_with_a_trace(run_folder: Path, capfd: pytest.CaptureFixture[str]) -> None:
    capfd.readouterr()
    code = cli_main(["diff", str(run_folder), str(run_folder / "trace.json.gz"), "--fail-if-slower", "5", "-q"])
    err = capfd.readouterr().err
    assert code == 1 and "cannot gate on step time: AFTER is the recorded trace of the run BEFORE" in err


def test_like_with_like_still_compares(run_folder: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The run folder against itself, and its trace against itself: one basis each, no change."""
    for side in (run_folder, run_folder / "trace.json.gz"):
        capfd.readouterr()
        assert cli_main(["diff", str(side), str(side), "--width", "200"]) == 0
        assert capfd.readouterr().out.splitlines()[2].startswith("No change")
