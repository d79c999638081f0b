"""The predictions against measurement: every workload recorded on both our H100 and our H200 (tests/data,
same commands and software) is predicted from each side and compared with the other side's own trace. The
shipped error table (predict/data/validation.json, which the intervals come from, and docs/predict.md) must be
what these traces give. Plus the cross-check against the roofline bias NeuSight published."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from stepscope.analysis.facts import compute_facts
from stepscope.hardware import load_table
from stepscope.predict.gpus import roofline_bias
from stepscope.predict.measured_error import measured_error
from stepscope.predict.validation import compare, host_speed, summary
from stepscope.trace.kineto import read_kineto
from stepscope.trace.model import Kind

DATA = Path(__file__).parent / "data"
GPUS = ("gpu_h100", "gpu_h200")
SHIPPED = Path(__file__).parents[1] / "src" / "stepscope" / "predict" / "data" / "validation.json"


def _workloads() -> list[str]:
    names = [{p.name for p in (DATA / g).iterdir() if (p / "trace.json.gz").is_file()} for g in GPUS]
    return sorted(names[0] & names[1])


@pytest.fixture(scope="module")
def results():
    table = load_table(use_user_file=False)
    out = []
    for name in _workloads():
        a, b = (read_kineto(DATA / g / name / "trace.json.gz") for g in GPUS)
        out += [compare(name, a, b, table), compare(name, b, a, table)]
    return out


def test_the_pairs_are_the_nine_measured_on_both_gpus() -> None:
    assert _workloads() == ["big_matmul", "cifar_rung1", "cifar_rung3", "cifar_rung4", "cifar_rung7", "copy_bound",
                            "gpu_compute_bound", "input_bound", "launch_bound"]


def test_the_shipped_error_table_is_what_the_traces_give(results) -> None:
    shipped = json.loads(SHIPPED.read_text())
    assert shipped["pairs"] == [r.to_dict() for r in results]
    assert shipped["summary"] == summary(results)
    assert measured_error().gpu_time_error == shipped["summary"]["gpu_time_error_max"]


def test_gpu_time_is_predicted_within_ten_percent_on_average(results) -> None:
    """The model's own part: GPU busy time per step, predicted from the other GPU, against the measured one."""
    errors = np.abs([r.gpu_error for r in results])
    assert errors.mean() < 0.10
    # GEMM-bound work (same FP32 peak on both) within 2%, memory-bound scaling (3.35 vs 4.8 TB/s) within 5%
    by = {(r.workload, r.origin): r for r in results}
    assert abs(by["big_matmul", "h100-sxm"].gpu_error) < 0.02
    assert abs(by["gpu_compute_bound", "h100-sxm"].gpu_error) < 0.02
    assert abs(by["cifar_rung4", "h100-sxm"].gpu_error) < 0.05


def test_with_the_hosts_speed_matched_the_step_is_within_ten_percent_on_average(results) -> None:
    """The two sessions' hosts differed (the H200's ran the same host ops 1.1-2x as fast), which the model cannot
    know; with that measured ratio given as --host-speed, the step time error is the model's alone."""
    assert np.mean(np.abs([r.host_matched_error for r in results])) < 0.10
    assert all(r.host_speed > 1 for r in results if r.origin == "h100-sxm")


def test_the_hosts_differed_between_the_sessions() -> None:
    """Independent of the model: the H200 session's host ran the DataLoader's __next__ of the same input-bound
    script (no workers, same data) in about half the time, so a same-host prediction cannot match there."""
    traces = [read_kineto(DATA / g / "input_bound" / "trace.json.gz") for g in GPUS]
    medians = []
    for t in traces:
        rows = t.names_where(lambda s: s.startswith("enumerate(DataLoader)"))
        medians.append(float(np.median(t.events.dur[rows])))
    assert medians[0] / medians[1] > 1.5
    assert host_speed(traces[0], traces[1]) > 1.5


def test_bottlenecks_are_predicted_as_measured_for_input_copy_and_launch_bound_work(results) -> None:
    for r in results:
        if r.workload in ("input_bound", "copy_bound", "launch_bound", "big_matmul"):
            assert r.predicted_bottleneck == r.measured_bottleneck, r


def _gemm_efficiency(gpu: str, workload: str, flops: float, peak: float) -> float:
    """Roofline time / measured time of the step's largest GEMM (its FLOPs computed by hand from the script)."""
    trace = read_kineto(DATA / gpu / workload / "trace.json.gz")
    facts = compute_facts(trace)
    ev = trace.events
    kernels = np.flatnonzero((ev.kind == Kind.KERNEL) & (ev.start >= facts.steps.start[0]))
    longest = float(np.median(np.sort(ev.dur[kernels])[-5:]))
    return flops / peak / (longest / 1e9)


def test_a_plain_roofline_under_predicts_as_neusight_found() -> None:
    """tests/gpu/big_matmul.py: x (4096 x 8192) @ w (8192 x 8192) forward and its weight gradient backward, each
    2 x 4096 x 8192^2 FLOPs; the bf16 run, 8192 x 16384 @ 16384 x 16384. A plain roofline (datasheet peak) predicts
    less time than measured on both GPUs, as NeuSight found for every GPU; a large GEMM, the best case, runs
    nearer its roof than NeuSight's median kernel on the H100 (0.67)."""
    fp32 = 2 * 4096 * 8192**2
    h100 = _gemm_efficiency("gpu_h100", "big_matmul", fp32, 67e12)
    h200 = _gemm_efficiency("gpu_h200", "big_matmul", fp32, 67e12)
    bf16 = _gemm_efficiency("gpu_h200", "big_matmul_bf16", 2 * 8192 * 16384**2, 989.5e12)
    for efficiency in (h100, h200, bf16):
        assert 0.5 < efficiency < 1.0
    assert h100 > roofline_bias()["gpus"]["h100-sxm"]  # type: ignore[index]
    # the same FP32 peak on both GPUs, and the same efficiency: the bias is the GPU's, and the ratio divides it out
    assert h100 == pytest.approx(h200, rel=0.03)
