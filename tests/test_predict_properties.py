"""Properties every prediction must have, whatever the figures, on real traces (the shared V100/A100 ones and our
own H100 fixtures) and on synthetic ones: the same GPU predicts the measured step, the host's own time never
shrinks, a faster GPU never makes a kernel slower, an input-bound step stays input-bound, and a GPU-bound job
that a much faster GPU leaves waiting on its host is reported as host-bound."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from builder import SGEMM, Timeline, TraceBuilder, input_bound_trace
from conftest import kineto_trace
from stepscope.analysis.costs import primary_device
from stepscope.analysis.facts import compute_facts
from stepscope.hardware import load_table
from stepscope.predict import PredictRequest, predict
from stepscope.predict.gpus import roofs
from stepscope.predict.scaling import scale
from stepscope.predict.target import run_target
from stepscope.predict.work import gpu_work
from stepscope.replay import device_waits, replay
from stepscope.trace import intervals as iv
from stepscope.trace.kineto import read_kineto
from stepscope.trace.model import Kind, Trace

DATA = Path(__file__).parent / "data"
TABLE = load_table(use_user_file=False)


def _read(path: Path) -> Trace:
    return read_kineto(path)


@pytest.mark.parametrize(("trace", "origin"), [
    ("v100_resnet_ns_units.json.gz", None),
    ("a100_convnet_ddp_rank0.json.gz", "a100-sxm-40gb"),  # an 'A100-PG509-200', which the table does not know
    ("a100_recsys_ddp_rank0.json.gz", None),
])
def test_the_same_gpu_predicts_the_measured_step_on_shared_traces(trace: str, origin: str | None) -> None:
    facts = compute_facts(_read(kineto_trace(trace)))
    gpu = origin or facts.trace.meta.devices[0].name
    p = predict(facts, PredictRequest(gpus=(gpu,), origin=origin), table=TABLE)
    measured = float(facts.steps.duration.mean()) / 1000
    assert p.origin.step_time_us == pytest.approx(measured, rel=1e-6)
    assert p.targets[0].step_time_us == pytest.approx(measured, rel=0.01)


@pytest.mark.parametrize("workload", ["input_bound", "cifar_rung3", "big_matmul"])
def test_the_same_gpu_predicts_the_measured_step_on_our_h100_traces(workload: str) -> None:
    facts = compute_facts(_read(DATA / "gpu_h100" / workload / "trace.json.gz"))
    p = predict(facts, PredictRequest(gpus=("h100",)), table=TABLE)
    assert p.targets[0].step_time_us == pytest.approx(float(facts.steps.duration.mean()) / 1000, rel=0.01)
    assert p.targets[0].bottleneck == p.origin.bottleneck


def _host_events_outside_waits(trace: Trace) -> list[tuple[int, int, int]]:
    """(kind, name, n-th of its kind and name) of the host ops and runtime calls that do not overlap a call that
    waits on the device (a sync, a pageable copy, a launch into a full launch queue): the replay keeps the host's
    order, so the n-th of a kind and name is the same event before and after."""
    ev = trace.events
    calls = device_waits(trace)
    waits = iv.union(ev.start[calls], ev.end[calls])
    host = np.flatnonzero(ev.of_kind(Kind.CPU_OP, Kind.RUNTIME, Kind.PYTHON))
    nth: dict[tuple[int, int], int] = {}
    keys = []
    for row in host.tolist():
        key = (int(ev.kind[row]), int(ev.name[row]))
        nth[key] = nth.get(key, -1) + 1
        keys.append((*key, nth[key]))
    free = iv.coverage(waits, ev.start[host], ev.end[host]) == 0
    return [k for k, f in zip(keys, free, strict=True) if f]


def _durations(trace: Trace) -> dict[tuple[int, int, int], int]:
    ev = trace.events
    host = np.flatnonzero(ev.of_kind(Kind.CPU_OP, Kind.RUNTIME, Kind.PYTHON))
    nth: dict[tuple[int, int], int] = {}
    out = {}
    for row in host.tolist():
        key = (int(ev.kind[row]), int(ev.name[row]))
        nth[key] = nth.get(key, -1) + 1
        out[(*key, nth[key])] = int(ev.dur[row])
    return out


@pytest.mark.parametrize(("trace", "target"), [
    ("v100_resnet_ns_units.json.gz", "h100"), ("a100_recsys_ddp_rank0.json.gz", "l4"),
])
def test_the_hosts_own_time_never_shrinks(trace: str, target: str) -> None:
    """Whether the target is faster or slower, the host's ops and calls that do not wait on the GPU keep their
    measured time, so the step never drops below them."""
    original = _read(kineto_trace(trace))
    device = primary_device(original)
    origin_roofs = roofs(TABLE.lookup(original.meta.devices[0].name).spec, TABLE)  # type: ignore[union-attr]
    work = gpu_work(original, device, origin_roofs)  # type: ignore[arg-type]
    run = run_target(compute_facts(original), device, work, origin_roofs,  # type: ignore[arg-type]
                     roofs(TABLE.lookup(target).spec, TABLE))  # type: ignore[union-attr]
    free = _host_events_outside_waits(original)
    before, after = _durations(original), _durations(run.trace)
    # Never less (to 0.1%: a few events with the same start, cudaEventQuery polls, can trade places and their n-th);
    # more where a slower GPU fills the launch queue that the origin's never filled.
    assert free and sum(after[k] for k in free) >= sum(before[k] for k in free) * (1 - 1e-3)
    facts = compute_facts(run.trace)
    host = compute_facts(original).breakdown.mean()
    assert facts.steps.duration.mean() >= host["dataloader"] + host["cpu_exec"] + host["runtime"] - 1


def test_a_faster_gpu_makes_no_kernel_and_no_step_slower_on_a_v100_trace() -> None:
    """V100 -> H100 SXM: every roof is higher (FP32 15.7 -> 67 TF, fp16 125 -> 989.5, 900 -> 3350 GB/s, 80 SMs at
    1530 MHz -> 132 at 1980, NVLink 2 -> 4, PCIe 3 -> 5)."""
    original = _read(kineto_trace("v100_resnet_ns_units.json.gz"))
    device = primary_device(original)
    ro, rt = roofs(TABLE.gpu("v100-sxm2"), TABLE), roofs(TABLE.gpu("h100-sxm"), TABLE)  # type: ignore[arg-type]
    work = gpu_work(original, device, ro)  # type: ignore[arg-type]
    dur = original.events.dur[work.rows]
    assert (scale(work, dur, ro, rt).dur <= dur).all()
    facts = compute_facts(original)
    run = run_target(facts, device, work, ro, rt)  # type: ignore[arg-type]
    assert run.view.step_ns <= facts.steps.duration.mean()
    assert run.view.gpu_ns < facts.steps.duration.mean()


@pytest.mark.parametrize("target", ["h200", "b200", "a100-80gb", "l4"])
def test_an_input_bound_step_stays_input_bound_on_our_h100_trace(target: str) -> None:
    facts = compute_facts(_read(DATA / "gpu_h100" / "input_bound" / "trace.json.gz"))
    p = predict(facts, PredictRequest(gpus=(target,)), table=TABLE)
    assert p.origin.bottleneck == "input_bound"
    assert p.targets[0].bottleneck == "input_bound"
    # The GPU's part is a small share, so the step barely moves: within the GPU time per step of the measured one.
    assert abs(p.targets[0].step_time_us - p.origin.step_time_us) <= p.targets[0].gpu_time_us + 1


def test_a_synthetic_input_bound_step_stays_input_bound(tmp_path: Path) -> None:
    """6 ms of DataLoader and 3 ms of bf16 convolutions per step on an A100: on an H100 the convolutions take
    3 ms x 312/989.5 (the A100 has no published bias), the DataLoader its 6 ms."""
    facts = compute_facts(read_kineto(input_bound_trace().write(tmp_path / "in.json")))
    p = predict(facts, PredictRequest(gpus=("h100",)), table=TABLE)
    assert (p.origin.bottleneck, p.targets[0].bottleneck) == ("input_bound", "input_bound")
    assert p.targets[0].step_time_us < p.origin.step_time_us
    assert p.targets[0].step_time_us > 6000


def test_a_gpu_bound_job_becomes_host_bound_on_a_faster_gpu(tmp_path: Path) -> None:
    """Per step 1.2 ms of Python, then 20 fp32 GEMMs of 1 ms launched 5 µs apart and a sync: GPU-bound on a V100.
    On a GPU with FP32 20x the V100's, the GEMMs take about 1 ms together and the host's 1.3 ms set the pace."""
    b = TraceBuilder(device_name="Tesla V100-SXM2-32GB", compute_capability=(7, 0), sm_count=80)
    tl = Timeline(b)
    for i in range(5):
        with tl.step(i):
            tl.cpu("python_work", 1200.0)
            for _ in range(20):
                with tl.op("aten::mm"):
                    tl.kernel(SGEMM, 1000.0)
            tl.sync()
    facts = compute_facts(read_kineto(b.write(tmp_path / "g.json")))
    device = primary_device(facts.trace)
    ro = roofs(TABLE.gpu("v100-sxm2"), TABLE)  # type: ignore[arg-type]
    fast = replace(roofs(TABLE.gpu("v100-sxm2"), TABLE), flops={"fp32": 20 * 15.7e12})  # type: ignore[arg-type]
    work = gpu_work(facts.trace, device, ro)  # type: ignore[arg-type]
    origin = run_target(facts, device, work, ro, ro)  # type: ignore[arg-type]
    faster = run_target(facts, device, work, ro, fast)  # type: ignore[arg-type]
    assert origin.view.bottleneck == "gpu_compute_bound"
    # A host-side pattern: the GPU now waits on the Python (after the sync, which the host could have skipped).
    assert faster.view.bottleneck in ("cpu_compute_bound", "launch_bound", "sync_bound")
    assert faster.view.utilization < 0.6
    # 1.2 ms of Python + 20 launches of ~9 µs + the last GEMM and the sync: about 2.3 ms, not 21 ms
    assert 2_000_000 < faster.view.step_ns < 2_600_000


def test_an_untouched_replay_is_the_trace_itself_on_the_largest_shared_trace() -> None:
    trace = _read(kineto_trace("v100_ddp_train_rank1.json.gz"))
    device = primary_device(trace)
    rows = np.flatnonzero(trace.is_gpu_activity & (trace.events.device == device))
    again = replay(trace, device=device, rows=rows, new_dur=trace.events.dur[rows])
    kept = ~trace.events.of_kind(Kind.GPU_ANNOTATION, Kind.GPU_SYNC)
    np.testing.assert_array_equal(np.sort(again.events.start), np.sort(trace.events.start[kept]))
    np.testing.assert_array_equal(np.sort(again.events.end), np.sort(trace.events.end[kept]))


def test_a_measured_origin_step_is_the_base_and_the_replay_gives_the_ratio() -> None:
    # The H100 trace replayed to H100 and H200; then the same with the origin measured (the step meter) at 1.5x the
    # replayed step: the origin is the measured step and every target 1.5x its replayed figure, costs alike.
    facts = compute_facts(_read(DATA / "gpu_h100" / "cifar_rung3" / "trace.json.gz"))
    request = PredictRequest(gpus=("h100", "h200"))
    replayed = predict(facts, request, table=TABLE, batch_size=32)
    measured = 1.5 * replayed.origin.step_time_us * 1e3
    on_meter = predict(facts, request, table=TABLE, batch_size=32, measured_step_ns=measured)
    assert on_meter.origin.step_time_us == pytest.approx(measured / 1e3, rel=1e-6)
    for a, b in zip(replayed.targets, on_meter.targets, strict=True):
        assert b.step_time_us == pytest.approx(1.5 * a.step_time_us, rel=1e-4)
        assert b.samples_per_s == pytest.approx(a.samples_per_s / 1.5, rel=1e-3)
    assert any("step meter" in w for w in on_meter.warnings)
