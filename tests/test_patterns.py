"""The pattern language on synthetic traces that each embody one pattern exactly: the verdict (primary
pattern) and the top recommendation, the shares, the thresholds, per-step shares and CPU-only runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import builder as sc
from builder import Timeline, TraceBuilder
from stepscope import analyze
from stepscope.advice.cpu_patterns import PYTHON_OVERHEAD_MIN_SHARE
from stepscope.advice.patterns import GPU_BOUND_UTILIZATION, MIN_SHARE
from stepscope.analysis.costs import COST_PARTS, step_costs
from stepscope.analysis.facts import compute_facts
from stepscope.model.report import Report
from stepscope.trace.kineto import read_kineto

GPU_IDS = {"gpu_compute_bound", "launch_bound", "sync_bound", "copy_bound"}


def report_of(b: TraceBuilder, tmp_path: Path) -> Report:
    return analyze(b.write(tmp_path / "t.json"))


def ids(report: Report) -> list[str]:
    return [p.id for p in report.patterns]


@pytest.mark.parametrize(("make", "primary", "top_fix"), [
    (sc.gpu_bound_trace, "gpu_compute_bound", "amp"),
    (sc.launch_bound_trace, "launch_bound", "cuda_graphs"),
    (sc.sync_bound_trace, "sync_bound", "remove_sync"),
    (sc.cpu_bound_trace, "cpu_compute_bound", "offload_cpu_work"),
    (sc.input_bound_trace, "input_bound", "dataloader_workers"),
    (sc.copy_bound_trace, "copy_bound", "pin_memory"),
    (sc.communication_bound_trace, "communication_bound", "overlap_communication"),
    (lambda: sc.cpu_only_trace("input"), "input_bound", "dataloader_workers"),
    (lambda: sc.cpu_only_trace("overhead"), "python_overhead", "torch_compile"),
], ids=["gpu", "launch", "sync", "cpu", "input", "copy", "communication", "cpu-only-input", "cpu-only-overhead"])
def test_each_synthetic_pattern_gives_its_verdict_and_fix(
    make: Callable[[], TraceBuilder], primary: str, top_fix: str, tmp_path: Path
) -> None:
    report = report_of(make(), tmp_path)
    assert ids(report)[0] == primary
    assert report.recommendations and report.recommendations[0].id == top_fix
    assert report.patterns[0].title and report.patterns[0].evidence["primary_in_steps"] == ["0", "1", "2", "3"]
    gains = [r.estimated_speedup for r in report.recommendations]
    assert gains == sorted(gains, reverse=True)  # ranked by estimated gain
    assert all("estimate" in r.estimate for r in report.recommendations)


def test_shares_are_the_measured_fractions(tmp_path: Path) -> None:
    # input_bound_trace: DataLoader 6000 µs, then six 500 µs convolutions and a sync: 9009 µs per step.
    report = report_of(sc.input_bound_trace(), tmp_path)
    assert report.summary.step_time_us == pytest.approx(9009.0)
    assert report.patterns[0].share == pytest.approx(6000 / 9009, abs=1e-3)
    assert report.patterns[0].evidence["iterator"] == "single-process"
    # copy_bound_trace: 40 MB at 4 GB/s = 10 ms exposed per 12.02 ms step.
    copy = report_of(sc.copy_bound_trace(), tmp_path)
    assert copy.patterns[0].evidence["exposed_copy_share"] == pytest.approx(10_000 / 12_022, abs=2e-3)
    assert copy.patterns[0].evidence["pageable_htod_bytes_per_step"] == 40_000_000


def test_cpu_only_runs_speak_of_the_cpu_only(tmp_path: Path) -> None:
    for kind in ("input", "overhead", "compute"):
        report = report_of(sc.cpu_only_trace(kind), tmp_path)
        assert report.device is not None and report.device.kind == "cpu"
        assert not set(ids(report)) & GPU_IDS, kind
        assert not {r.id for r in report.recommendations} & {"amp", "tf32", "cuda_graphs", "pin_memory"}
    assert ids(report_of(sc.cpu_only_trace("compute"), tmp_path)) == ["cpu_compute_bound"]
    overhead = report_of(sc.cpu_only_trace("overhead"), tmp_path).patterns[0]
    assert overhead.share >= PYTHON_OVERHEAD_MIN_SHARE and overhead.evidence["ops_per_step"] == 200


def _loader_share_trace(dataloader_us: float) -> TraceBuilder:
    b = TraceBuilder()
    tl = Timeline(b)
    for i in range(4):
        with tl.step(i):
            tl.dataloader(dataloader_us)
            for _ in range(10):
                with tl.op("aten::mm"):
                    tl.kernel("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 1000.0)
            tl.sync()
    return b


def test_min_share_threshold(tmp_path: Path) -> None:
    # ~10 ms of GPU work per step: 400 µs of DataLoader is under MIN_SHARE, 700 µs is over it.
    below = report_of(_loader_share_trace(400.0), tmp_path)
    above = report_of(_loader_share_trace(700.0), tmp_path)
    assert "input_bound" not in ids(below) and ids(below) == ["gpu_compute_bound"]
    # Both hold at once: the GPU is busy over 90% of the step and the DataLoader costs over 5% of it.
    assert ids(above) == ["gpu_compute_bound", "input_bound"]
    assert above.patterns[0].share >= GPU_BOUND_UTILIZATION and above.patterns[1].share >= MIN_SHARE


def test_gpu_compute_bound_as_the_largest_part_when_nothing_else_holds(tmp_path: Path) -> None:
    # 4 ms of GPU work, then about 200 µs each of DataLoader, CPU work, launch gaps and a copy: ~83% busy,
    # below 90%, and no other cause reaches MIN_SHARE.
    b = TraceBuilder()
    tl = Timeline(b)
    for i in range(4):
        with tl.step(i):
            tl.dataloader(200.0)
            tl.cpu("aten::to_cpu_work", 200.0)
            tl.copy("HtoD", 4_000_000, gb_s=20.0, host="Pinned", blocking=False)
            for _ in range(4):
                with tl.op("aten::mm", overhead=20.0):
                    tl.kernel("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 1000.0)
            tl.sync()
    report = report_of(b, tmp_path)
    assert ids(report) == ["gpu_compute_bound"]
    assert 0.5 <= report.patterns[0].share < GPU_BOUND_UTILIZATION


def test_per_step_shares_and_primary_steps(tmp_path: Path) -> None:
    """Every other batch takes 20 ms to load; the steps' GPU work is 20 ms. (Two of four steps: no one-off.)"""
    b = TraceBuilder()
    tl = Timeline(b)
    for i in range(4):
        with tl.step(i):
            if i % 2 == 0:
                tl.dataloader(20_000.0)
            for _ in range(20):
                with tl.op("aten::mm"):
                    tl.kernel("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 1000.0)
            tl.sync()
    report = report_of(b, tmp_path)
    loader = next(p for p in report.patterns if p.id == "input_bound")
    per_step = loader.evidence["share_per_step"]
    assert per_step["0"] == pytest.approx(0.5, abs=0.01) and per_step["1"] == per_step["3"] == 0.0
    assert loader.evidence["primary_in_steps"] == ["0", "2"]


def test_a_one_off_step_does_not_decide_the_verdict(tmp_path: Path) -> None:
    """Only the first batch takes 20 ms to load (a 2x step among four): the verdict is the other steps'."""
    b = TraceBuilder()
    tl = Timeline(b)
    for i in range(4):
        with tl.step(i):
            if i == 0:
                tl.dataloader(20_000.0)
            for _ in range(20):
                with tl.op("aten::mm"):
                    tl.kernel("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 1000.0)
            tl.sync()
    report = report_of(b, tmp_path)
    assert [p.id for p in report.patterns] == ["gpu_compute_bound"]
    assert report.patterns[0].evidence["share_per_step"]["0"] == pytest.approx(0.5, abs=0.01)
    assert any("step 0 (" in n and "one-off" in n for n in report.notes)


def test_first_call_cost_is_named_and_not_treated_as_steady_launch_overhead(tmp_path: Path) -> None:
    b = TraceBuilder()
    tl = Timeline(b)
    for i in range(2):  # two steps: neither can be set aside as a one-off
        with tl.step(i):
            with tl.op("aten::add"):
                tl.kernel(sc.ADD, 5.0, host_us=5000.0 if i == 0 else 5.0)
            for _ in range(30):
                with tl.op("aten::add"):
                    tl.kernel(sc.ADD, 5.0)
    report = report_of(b, tmp_path)
    launch = report.patterns[0]
    assert launch.id == "launch_bound" and launch.evidence["slowest_call"]["first_call_cost"]
    assert "first-call cost" in launch.title
    assert not {r.id for r in report.recommendations} & {"cuda_graphs", "larger_batch"}


def test_a_first_call_cost_in_one_step_of_several_is_a_one_off(tmp_path: Path) -> None:
    b = TraceBuilder()
    tl = Timeline(b)
    for i in range(3):
        with tl.step(i):
            with tl.op("aten::add"):
                tl.kernel(sc.ADD, 5.0, host_us=5000.0 if i == 0 else 5.0)
            for _ in range(30):
                with tl.op("aten::add"):
                    tl.kernel(sc.ADD, 5.0)
    report = report_of(b, tmp_path)
    assert any(n.startswith("step 0 (") and "one-off" in n for n in report.notes)
    assert report.patterns and all("first-call cost" not in p.title for p in report.patterns)


SCENARIOS = [sc.gpu_bound_trace, sc.launch_bound_trace, sc.sync_bound_trace, sc.cpu_bound_trace,
             sc.input_bound_trace, sc.copy_bound_trace, sc.communication_bound_trace, sc.v100_resnet50_trace,
             sc.sync_causes_trace]


@pytest.mark.parametrize("make", SCENARIOS, ids=lambda f: f.__name__)
def test_attribution_parts_add_up_to_each_step(make: Callable[[], TraceBuilder], tmp_path: Path) -> None:
    trace = read_kineto(make().write(tmp_path / "t.json"))
    facts = compute_facts(trace)
    costs = step_costs(trace, facts.steps)
    assert costs is not None and tuple(costs.parts) == COST_PARTS
    total = sum(costs.parts.values())
    assert np.array_equal(total, facts.steps.duration)
    assert all((p >= 0).all() for p in costs.parts.values())
    assert sum(costs.share(p) for p in COST_PARTS) == pytest.approx(1.0)


def test_host_op_nesting_and_self_time(tmp_path: Path) -> None:
    from stepscope.analysis.hostops import count_inside, nesting_depth, outermost, self_time
    from stepscope.trace.model import Kind

    b = TraceBuilder(device_name=None)
    b.op("aten::linear", 0, 100)  # encloses t (0-10) and addmm (10-95), which encloses expand (10-12)
    b.op("aten::t", 0, 10)
    b.op("aten::addmm", 10, 95)
    b.op("aten::expand", 10, 12)
    b.op("aten::relu", 100, 130, tid=sc.BACKWARD_TID)  # another thread
    trace = read_kineto(b.write(tmp_path / "t.json"))
    ops = np.flatnonzero(trace.events.kind == Kind.CPU_OP)
    names = [trace.name_of(r) for r in ops]
    depth = dict(zip(names, nesting_depth(trace, ops).tolist(), strict=True))
    assert depth == {"aten::linear": 0, "aten::t": 1, "aten::addmm": 1, "aten::expand": 2, "aten::relu": 0}
    own = dict(zip(names, (self_time(trace, ops) // 1000).tolist(), strict=True))
    assert own == {"aten::linear": 5, "aten::t": 10, "aten::addmm": 83, "aten::expand": 2, "aten::relu": 30}
    assert [trace.name_of(r) for r in outermost(trace, ops)] == ["aten::linear", "aten::relu"]
    assert count_inside(trace, ops[:1], ops).tolist() == [4]  # linear and the three ops inside it
