"""The step-time breakdown agrees with the PyTorch profiler TensorBoard plugin's Overview within 1%.

The plugin's numbers were computed by the plugin itself (torch-tb-profiler 0.4.3) on the shared traces;
tests/data/tb_overview/make_fixtures.py regenerates them and explains the two normalisations its input
needs. Kernel and communication are compared as one sum: the plugin files NCCL kernels launched outside
any recorded op as computation, stepscope files them as communication.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import kineto_trace
from stepscope import analyze

FIXTURES = Path(__file__).parent / "data" / "tb_overview"
CATEGORIES = ("kernel", "memcpy", "memset", "runtime", "dataloader", "cpu_exec", "other")


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_breakdown_matches_tensorboard_plugin(fixture: Path) -> None:
    expected = json.loads(fixture.read_text())["steps"]
    report = analyze(kineto_trace(f"{fixture.stem}.json.gz"))
    ours = {s.id: s for s in report.steps}
    assert [row["step"] for row in expected] == [s.id for s in report.steps]
    for row in expected:
        step = ours[row["step"]]
        tolerance = 0.01 * row["total"]
        assert step.duration_us == pytest.approx(row["total"], abs=tolerance)
        got = dict(step.breakdown_us)
        got["kernel"] += got.pop("communication")
        want = dict(row)
        want["kernel"] += want.pop("communication")
        for category in CATEGORIES:
            assert got[category] == pytest.approx(want[category], abs=tolerance), (row["step"], category)
