"""The replay's loop in C (replay/_walk.c) gives the replays its Python loop gives: the same table, column by column,
on recorded GPU traces, as they are and with the host sped up and kernels shortened; and a walk whose integers a
double cannot add exactly is left to the Python loop."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from conftest import kineto_trace
from stepscope.replay import device, engine
from stepscope.trace.load import read_trace

pytest.importorskip("stepscope.replay._walk")
DATA = Path(__file__).parent / "data"


def _replays(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, object]]:
    pairs = []
    for change in ({}, {"host_speed": 1.7}, {"shorter": 0.5}):
        got = []
        for walk in (engine._walk, None):
            monkeypatch.setattr(engine, "_walk", walk)
            trace = read_trace(path)
            if "shorter" in change:
                rows = np.flatnonzero(trace.is_gpu_activity)
                got.append(engine.replay(trace, rows=rows, new_dur=trace.events.dur[rows] * change["shorter"]))
            else:
                got.append(engine.replay(trace, **change))
        pairs.append((got[0], got[1]))
    return pairs


@pytest.mark.parametrize("path", [DATA / "gpu_h100" / "big_matmul" / "trace.json.gz",
                                  DATA / "gpu_h200" / "launch_bound" / "trace.json.gz",
                                  "v100_ddp_train_rank1.json.gz", "a100_recsys_ddp_rank0.json.gz"])
def test_the_loop_in_c_replays_as_the_python_loop(path: Path | str, monkeypatch: pytest.MonkeyPatch) -> None:
    file = path if isinstance(path, Path) else kineto_trace(path)
    if not file.exists():
        pytest.skip(f"{file} is not available")
    for with_c, without in _replays(file, monkeypatch):
        for f in dataclasses.fields(with_c.events):
            a, b = getattr(with_c.events, f.name), getattr(without.events, f.name)
            np.testing.assert_array_equal(a, b, err_msg=f.name)


def test_a_walk_with_integers_beyond_a_doubles_exact_range_goes_the_python_way() -> None:
    n = 3
    ops = device.DeviceOps(rows=np.arange(n), start=np.zeros(n, dtype=np.int64), end=np.ones(n, dtype=np.int64),
                           stream=np.zeros(n, dtype=np.int64), launch=np.zeros(n, dtype=np.int64),
                           linked=np.ones(n, dtype=bool), latency=np.zeros(n, dtype=np.int64),
                           prev=np.array([-1, 0, 1]), gap=np.zeros(n, dtype=np.int64), dep=np.full(n, -1),
                           delay=np.array([0, device.EXACT_INT, 0]), order=np.arange(n), key=np.zeros(n))
    assert ops.walk.arrays is None
    fine = dataclasses.replace(ops, delay=np.array([0, device.EXACT_INT - 1, 0]))
    assert fine.walk.arrays is not None
