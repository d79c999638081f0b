"""The target machine's host speed, from the calibrations `stepscope run` records on each machine."""

from __future__ import annotations

import json
import math
from pathlib import Path

import msgspec
import pytest

from stepscope.capture.calibrate import LOOP_VERSION, ProfilerCost
from stepscope.errors import StepscopeError
from stepscope.pipeline import analyze
from stepscope.predict import PredictRequest
from stepscope.predict.host import host_speed, read_host

H100 = Path(__file__).parent / "data" / "gpu_h100"


def _doc(op: float, launch: float, loop: str = LOOP_VERSION) -> dict:
    return {"plain_op_ns": op, "plain_launch_ns": launch, "loop": loop, "op_ns": 1000.0, "launch_ns": 1000.0,
            "alloc_ns": 0.0, "range_ns": 0.0, "record_shapes": False, "profile_memory": False, "with_stack": False,
            "cuda": True, "seconds": 1.0}


def _cal(op: float, launch: float, loop: str = LOOP_VERSION) -> ProfilerCost:
    return msgspec.convert(_doc(op, launch, loop), ProfilerCost)


def test_the_speed_is_the_geometric_mean_of_the_operator_and_launch_ratios() -> None:
    speed, how = host_speed(_cal(1000, 8000), _cal(500, 2000))
    assert speed == pytest.approx(math.sqrt(2 * 4))  # operators 2x, launches 4x as fast
    assert "2.83x" in how


def test_no_speed_without_both_calibrations_by_the_same_loops() -> None:
    assert host_speed(_cal(1000, 1000), None)[0] is None
    assert host_speed(None, _cal(1000, 1000))[0] is None
    speed, how = host_speed(_cal(1000, 1000, loop="older"), _cal(500, 500))
    assert speed is None and "different loops" in how


def test_read_host_takes_a_run_folder_or_its_file(tmp_path: Path) -> None:
    (tmp_path / "calibration.json").write_text(json.dumps(_doc(700, 900)))
    assert read_host(tmp_path).plain_op_ns == 700 == read_host(tmp_path / "calibration.json").plain_op_ns
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(StepscopeError, match="no host speed"):
        read_host(tmp_path / "bad.json")


def test_a_host_bound_step_follows_the_target_host() -> None:
    """The 200-layer launch-bound example on an H100: the GPU idles most of the step, so on the same GPU with a host
    twice as fast the step about halves."""
    trace = H100 / "launch_bound" / "trace.json.gz"
    origin = _cal(1000, 1000)
    same = analyze(trace, predict=PredictRequest(gpus=("h100",)))
    faster = analyze(trace, predict=PredictRequest(gpus=("h100",), target_host=_cal(500, 500)), calibration=origin)
    before = same.prediction.targets[0].step_time_us  # type: ignore[union-attr]
    after = faster.prediction.targets[0].step_time_us  # type: ignore[union-attr]
    assert after < 0.6 * before
    assert any("2.00x as fast" in n for n in faster.notes)
