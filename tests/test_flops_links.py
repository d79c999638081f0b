"""FLOP counting when a step holds a kernel launched outside every op (a raw cudaLaunchKernel, a Triton launch
from Python) beside an op that has a FLOP count: the op keeps its kernel, the bare launch gets none, no crash."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from builder import TraceBuilder
from stepscope.analysis.flops import count_flops
from stepscope.analysis.steps import find_steps
from stepscope.pipeline import analyze
from stepscope.trace.kineto import read_kineto

MM_FLOPS = 2_000_000  # the op's own "flops" argument, as the profiler writes it with with_flops=True


def bare_launch_trace(path: Path) -> Path:
    """Three steps: an aten::mm (with its FLOP count) launching an sgemm, then a Triton kernel launched through
    cuLaunchKernel with no op around the call."""
    b = TraceBuilder()
    for i in range(3):
        t = i * 1000.0
        b.step(i, t, t + 900)
        b.op("aten::mm", t + 10, t + 100, flops=MM_FLOPS)
        b.launch("ampere_sgemm_128x64_nn", (t + 20, t + 30), (t + 40, t + 90))
        b.launch("triton_poi_fused_add_0", (t + 200, t + 210), (t + 220, t + 260), api="cuLaunchKernel")
    return b.write(path)


def test_a_bare_launch_beside_a_priced_op_is_joined_to_no_op(tmp_path: Path) -> None:
    trace = read_kineto(bare_launch_trace(tmp_path / "t.json"))
    counted = count_flops(trace, find_steps(trace))
    names = [trace.name_of(int(r)) for r in counted.kernel_rows]
    assert names.count("ampere_sgemm_128x64_nn") == 3 and names.count("triton_poi_fused_add_0") == 3
    triton = np.array([n.startswith("triton") for n in names])
    assert (counted.kernel_op[triton] == -1).all() and (counted.kernel_launcher[triton] == -1).all()
    mm = [trace.name_of(int(counted.rows[i])) for i in counted.kernel_op[~triton]]
    assert mm == ["aten::mm"] * 3
    assert counted.flops.sum() == 3 * MM_FLOPS


def test_the_whole_analysis_of_it_runs(tmp_path: Path) -> None:
    report = analyze(bare_launch_trace(tmp_path / "t.json"))
    assert [s.id for s in report.steps] == ["0", "1", "2"]
