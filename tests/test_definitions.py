"""Exact answers for every definition in DESIGN.md, on synthetic traces built to embody it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder import BACKWARD_TID, TraceBuilder, worked_example
from stepscope import analyze
from stepscope.analysis.facts import compute_facts
from stepscope.trace.kineto import read_kineto


def facts_of(b: TraceBuilder, tmp_path: Path, name: str = "t.json"):
    return compute_facts(read_kineto(b.write(tmp_path / name)))


def test_worked_example_breakdown(builder: TraceBuilder, tmp_path: Path) -> None:
    """DESIGN.md's worked example (µs): kernel 15, memcpy 10, memset 5, runtime 30, dataloader 180,
    cpu_exec 35, other 125 = 400."""
    b = worked_example(builder)
    f = facts_of(b, tmp_path)
    assert f.breakdown.categories[-1] == "other"
    got = {k: v / 1000 for k, v in f.breakdown.mean().items()}
    assert got == {"kernel": 15, "memcpy": 10, "memset": 5, "communication": 0, "runtime": 30,
                   "dataloader": 180, "cpu_exec": 35, "other": 125}
    assert f.steps.duration.tolist() == [400_000]


def test_breakdown_parts_sum_to_step_on_every_real_trace() -> None:
    from conftest import KINETO

    for path in sorted(KINETO.rglob("*.json.gz")):
        f = compute_facts(read_kineto(path))
        assert (f.breakdown.per_step >= 0).all(), path
        assert np.array_equal(f.breakdown.per_step.sum(axis=1), f.steps.duration), path
        assert (np.diff(f.steps.start) >= 0).all() and (f.steps.start[1:] >= f.steps.end[:-1]).all(), path


def test_steps_stretch_to_gpu_end_and_are_back_to_back(builder: TraceBuilder, tmp_path: Path) -> None:
    b = builder
    for i, start in enumerate((0, 100, 200)):
        b.step(i, start, start + 100)
        # each step launches a kernel that runs 50 µs past the step's host end
        b.launch("k", (start + 80, start + 90), (start + 120, start + 150))
    b.step(3, 300, 400)
    b.launch("k", (380, 390), (400, 420))
    f = facts_of(b, tmp_path)
    assert f.steps.ids == ("0", "1", "2", "3")
    assert (f.steps.end // 1000).tolist() == [150, 250, 350, 420]
    assert (f.steps.start // 1000).tolist() == [0, 150, 250, 350]


def test_trailing_steps_without_gpu_work_and_cut_off_step_are_dropped(builder: TraceBuilder, tmp_path: Path) -> None:
    b = builder
    for i in range(3):
        b.step(i, i * 100, i * 100 + 100)
        for j in range(10):
            b.launch("k", (i * 100 + j, i * 100 + j + 1), (i * 100 + j + 2, i * 100 + j + 3))
    b.step(3, 300, 400)  # cut off: 7 launches < 0.8 x 10
    for j in range(7):
        b.launch("k", (300 + j, 301 + j), (302 + j, 303 + j))
    b.step(4, 400, 500)  # no GPU work at all
    b.op("aten::empty", 410, 420)
    f = facts_of(b, tmp_path)
    assert f.steps.ids == ("0", "1", "2")
    assert len(f.steps.dropped) == 2


def test_without_steps_the_window_is_the_span_of_gpu_activity(builder: TraceBuilder, tmp_path: Path) -> None:
    b = builder
    b.op("aten::empty", 0, 5)  # start-up before the first launch: not part of any step
    b.op("aten::mm", 10, 50)
    b.launch("gemm", (20, 25), (30, 90))
    f = facts_of(b, tmp_path)
    assert f.steps.source == "GPU activity span"
    assert (f.steps.start[0], f.steps.end[0]) == (20_000, 90_000)  # the launch's start to the kernel's end


def test_without_steps_or_gpu_work_the_window_is_the_whole_trace(builder: TraceBuilder, tmp_path: Path) -> None:
    b = builder
    b.op("aten::mm", 10, 50)
    b.op("aten::add", 60, 70)
    f = facts_of(b, tmp_path)
    assert f.steps.source == "whole trace" and (f.steps.start[0], f.steps.end[0]) == (0, 60_000)


def test_gpu_utilisation_and_idle_causes(builder: TraceBuilder, tmp_path: Path) -> None:
    """Kernel A [10,30]; B launched at 50 after the GPU went idle at 30 -> host wait 30..60;
    C launched early but waits on an event until 100 -> other 70..100; D back to back at 110.02."""
    b = builder
    b.step(1, 0, 120)
    b.launch("A", (0, 5), (10, 30))
    b.launch("B", (50, 55), (60, 70))
    b.launch("C", (56, 58), (100, 110))
    b.launch("D", (59, 60), (110.02, 120))
    f = facts_of(b, tmp_path)
    dev = f.gpu.devices[0]
    assert dev.busy.tolist() == [20_000 + 10_000 + 10_000 + 9_980]
    assert dev.host_wait.tolist() == [30_000]  # before B
    assert dev.other_idle.tolist() == [10_000 + 30_000]  # [0,10) before A (launched at 0, not after) + before C
    assert dev.kernel_wait.tolist() == [20]  # the 20 ns gap before D
    np.testing.assert_allclose(f.gpu.utilization_per_step(f.steps), [49_980 / 120_000])


def test_memcpy_and_memset_do_not_count_as_gpu_busy(builder: TraceBuilder, tmp_path: Path) -> None:
    b = builder
    b.step(1, 0, 100)
    b.launch("k", (0, 1), (10, 20))
    b.copy("HtoD", (30, 31), (40, 90), nbytes=10)
    f = facts_of(b, tmp_path)
    assert f.gpu.devices[0].busy.tolist() == [10_000]


def test_kernel_statistics(builder: TraceBuilder, tmp_path: Path) -> None:
    b = builder
    b.step(1, 0, 1000)
    b.launch("sm90_xmma_gemm_bf16bf16_bf16f32", (0, 5), (10, 110))  # tensor cores, 100 µs, delay 10
    b.launch("ampere_sgemm_128x64_nn", (6, 8), (110, 160))  # SIMT fp32, 50 µs, delay 104
    for i in range(8):  # short elementwise kernels, 2 µs each, delay 2
        b.launch("void at::native::vectorized_elementwise_kernel<4>", (200 + 10 * i, 201 + 10 * i),
                 (202 + 10 * i, 204 + 10 * i))
    f = facts_of(b, tmp_path)
    k = f.kernels
    assert k.count == 10 and k.count_per_step.tolist() == [10]
    assert k.total_ns == 166_000
    assert k.tensor_core_ns == 100_000
    assert k.short_count == 8 and k.short_share == pytest.approx(0.8)
    assert sorted((k.launch_delay_ns // 1000).tolist()) == [2] * 8 + [10, 104]
    assert k.top[0].name.startswith("sm90_xmma") and k.top[0].tensor_core and k.top[0].share == pytest.approx(100 / 166)


def test_syncs_counted_per_api_with_their_cause(builder: TraceBuilder, tmp_path: Path) -> None:
    b = builder
    for i in range(2):
        t = i * 100
        b.step(i, t, t + 100)
        b.launch("k", (t, t + 1), (t + 2, t + 3))  # GPU work so steps are kept
        b.op("aten::item", t + 10, t + 40)
        b.op("aten::_local_scalar_dense", t + 11, t + 39)
        b.runtime("cudaMemcpyAsync", t + 12, t + 14)
        b.runtime("cudaStreamSynchronize", t + 15, t + 35)
    b.runtime("hipDeviceSynchronize", 150, 152)
    b.runtime("cudaMemcpy", 160, 170)  # synchronous copy
    b.runtime("cudaStreamWaitEvent", 171, 172)  # not a host sync
    f = facts_of(b, tmp_path)
    apis = {a.api: (a.count_per_step.tolist(), (a.time_per_step // 1000).tolist()) for a in f.syncs.apis}
    assert apis == {"cudaStreamSynchronize": ([1, 1], [20, 20]), "hipDeviceSynchronize": ([0, 1], [0, 2]),
                    "cudaMemcpy": ([0, 1], [0, 10])}
    top = f.syncs.causes[0]
    assert (top.op, top.inner_op, top.api, top.count) == ("aten::item", "aten::_local_scalar_dense",
                                                          "cudaStreamSynchronize", 2)


def test_copies_direction_bytes_bandwidth_and_memory_type(builder: TraceBuilder, tmp_path: Path) -> None:
    b = builder
    b.step(1, 0, 1000)
    b.copy("HtoD", (0, 1), (10, 110), nbytes=1_000_000, host="Pageable")  # 10 GB/s
    b.copy("HtoD", (2, 3), (110, 160), nbytes=1_000_000, host="Pinned")  # 20 GB/s
    b.copy("DtoH", (4, 5), (200, 204), nbytes=4, host="Pageable")
    b.launch("k", (6, 7), (300, 310))
    f = facts_of(b, tmp_path)
    by_dir = {c.direction: c for c in f.copies.directions}
    htod = by_dir["HtoD"]
    assert (htod.count, htod.bytes, htod.pageable_bytes, htod.pinned_bytes) == (2, 2_000_000, 1_000_000, 1_000_000)
    assert htod.bandwidth_gb_s == pytest.approx(2_000_000 / 150_000)
    assert by_dir["DtoH"].pageable_count == 1
    assert f.copies.pageable_htod_bytes_per_step.tolist() == [1_000_000]


def test_communication_takes_collective_kernels_and_ops(builder: TraceBuilder, tmp_path: Path) -> None:
    b = builder
    b.step(1, 0, 100)
    b.launch("gemm", (0, 1), (10, 30))
    b.annotation("nccl:all_reduce", 40, 45, tid=BACKWARD_TID)
    b.launch("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", (41, 42), (25, 60), stream=20)
    f = facts_of(b, tmp_path)
    mean = f.breakdown.mean()
    assert mean["kernel"] == 20_000  # [10, 30]
    assert mean["communication"] == 30_000  # [30, 60] left after kernel took [25, 30]


def test_cpu_only_trace_reports_cpu_and_no_gpu_figures(builder: TraceBuilder, tmp_path: Path) -> None:
    b = TraceBuilder(device_name=None)
    b.step(1, 0, 100)
    b.op("aten::mm", 10, 90)
    report = analyze(b.write(tmp_path / "cpu.json"))
    assert report.device is not None and report.device.kind == "cpu"
    assert report.summary.gpu_utilization is None and report.gpu is None and report.kernels is None
    assert report.summary.breakdown_us["cpu_exec"] == 80.0


def test_samples_per_second_from_batch_size(builder: TraceBuilder, tmp_path: Path) -> None:
    b = builder
    b.step(1, 0, 1000)
    b.launch("k", (0, 1), (2, 3))
    b.step(2, 1000, 2000)
    b.launch("k", (1000, 1001), (1002, 1003))
    report = analyze(b.write(tmp_path / "t.json.gz"), batch_size=32)
    assert report.summary.steps_per_s == pytest.approx(1000.0)
    assert report.summary.samples_per_s == pytest.approx(32_000.0)


def test_own_source_ranges_are_never_taken_as_steps(builder: TraceBuilder, tmp_path: Path) -> None:
    """Without ProfilerStep, a repeated user range is the step; stepscope's line ranges never are."""
    b = builder
    for i in range(4):
        t = i * 100.0
        b.annotation("stepscope.line|train.py|12|main|loss = model(x)", t, t + 40)
        b.launch("k", (t + 1, t + 2), (t + 3, t + 4))
    assert facts_of(b, tmp_path).steps.source == "GPU activity span"
    for i in range(4):
        b.annotation("train_step", i * 100.0, i * 100.0 + 90)
    f = facts_of(b, tmp_path, "t2.json")
    assert f.steps.source == "range train_step" and len(f.steps) == 4
