"""Every dialect in ../shared/traces/kineto/, read and analysed; figures checked against the files."""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import KINETO, kineto_trace
from stepscope import analyze
from stepscope.trace.kineto import read_kineto
from stepscope.trace.model import CopyKind, HostMemory, Kind


def raw_events(name: str) -> list[dict]:
    return json.loads(gzip.decompress(kineto_trace(name).read_bytes()))["traceEvents"]


def test_v100_ddp_rank1_device_steps_and_memory() -> None:
    report = analyze(kineto_trace("v100_ddp_train_rank1.json.gz"))
    assert report.device is not None
    assert (report.device.name, report.device.compute_capability, report.device.sm_count) == (
        "Tesla V100-SXM2-32GB", "7.0", 80)
    assert (report.rank, report.world_size) == (1, 2)
    assert [s.id for s in report.steps] == ["2", "3", "4", "5", "6"]
    assert report.summary.step_source == "ProfilerStep"
    # NCCL all-reduce kernels are communication, and the run uses no tensor cores (fp32 volta_sgemm).
    assert report.summary.breakdown_us["communication"] > 50_000
    assert report.kernels is not None and report.kernels.tensor_core_share == 0.0
    assert report.kernels.top[0].collective
    # profile_memory=True: the allocator peak on device 1 is in the trace.
    peak = max(e["args"]["Total Allocated"] for e in raw_events("v100_ddp_train_rank1.json.gz")
               if e.get("name") == "[memory]" and e["args"].get("Device Id") == 1 and e["args"]["Device Type"] == 1)
    assert {m.device: m.peak_allocated_bytes for m in report.memory}[1] == peak


def test_kernel_counts_match_the_file() -> None:
    events = raw_events("a100_recsys_ddp_rank0.json.gz")
    trace = read_kineto(kineto_trace("a100_recsys_ddp_rank0.json.gz"))
    assert int((trace.events.kind == Kind.KERNEL).sum()) == sum(e.get("cat") == "kernel" for e in events)
    pinned_htod = sum(e.get("name") == "Memcpy HtoD (Pinned -> Device)" for e in events)
    ev = trace.events
    assert int(((ev.copy_kind == CopyKind.HTOD) & (ev.host_memory == HostMemory.PINNED)).sum()) == pinned_htod


def test_ns_units_keep_fractional_microseconds() -> None:
    trace = read_kineto(kineto_trace("v100_resnet_ns_units.json.gz"))
    durations = trace.events.dur[trace.events.kind == Kind.KERNEL]
    assert (durations % 1000 != 0).any(), "fractional µs survive as ns"
    report = analyze(kineto_trace("v100_resnet_ns_units.json.gz"))
    assert [s.id for s in report.steps] == ["101", "102", "103", "104", "105"]
    assert report.summary.gpu_utilization is not None and report.summary.gpu_utilization > 0.9


def test_old_category_names_without_device_properties() -> None:
    trace = read_kineto(kineto_trace("old_categories_inference_rank1.json.gz"))
    assert int((trace.events.kind == Kind.KERNEL).sum()) == 4
    assert int((trace.events.kind == Kind.RUNTIME).sum()) == 8
    report = analyze(kineto_trace("old_categories_inference_rank1.json.gz"))
    assert report.summary.step_source == "GPU activity span"
    assert report.device is not None and report.device.kind == "cuda" and "unknown" in report.device.name
    assert any("deviceProperties" in n for n in report.notes)
    assert report.kernels is not None and report.kernels.launch_delay_us is not None  # runtime links kept


def test_rocm_hip_runtime_and_tensile_kernels() -> None:
    report = analyze(kineto_trace("mi250_rocm_toy_train.json.gz"))
    assert report.accelerator == "rocm" and report.device is not None and report.device.kind == "rocm"
    assert report.syncs is not None and report.syncs.apis[0].api == "hipMemcpyWithStream"
    assert report.kernels is not None and report.kernels.tensor_core_share and report.kernels.tensor_core_share > 0
    assert report.summary.dropped_steps  # ProfilerStep#2 launched nothing


def test_triton_kernel_launched_through_the_driver_api() -> None:
    trace = read_kineto(kineto_trace("a100_triton_kernel.json.gz"))
    from stepscope.analysis.launches import launching_call

    kernel = int((trace.events.kind == Kind.KERNEL).nonzero()[0][0])
    launcher = launching_call(trace)[kernel]
    assert trace.name_of(kernel) == "triton_poi_fused_add_cos_sin_0"
    assert trace.name_of(launcher) == "cuLaunchKernel"


def test_event_sync_traces() -> None:
    report = analyze(kineto_trace("a100_event_sync_tiny.json.gz"))
    assert report.syncs is not None
    assert {a.api for a in report.syncs.apis} == {"cudaEventSynchronize", "cudaDeviceSynchronize",
                                                  "cudaStreamSynchronize"}
    causes = {c.op for c in report.syncs.causes}
    assert "aten::is_nonzero" in causes
    multi = analyze(kineto_trace("a100_event_sync_multistream_tiny.json.gz"))
    assert multi.summary.step_source == "GPU activity span" and multi.kernels is not None


def test_non_gpu_accelerator_is_reported_as_such() -> None:
    report = analyze(kineto_trace("mtia_train_stress_456k_events.json.gz"))
    assert report.accelerator == "other"
    assert report.device is not None and report.device.kind == "other" and "MTIA" in report.device.name
    assert report.summary.gpu_utilization is None and report.kernels is None and report.gpu is None
    assert any("non-GPU accelerator" in n for n in report.notes)


def test_rank_folder_gives_per_rank_rows_and_cross_rank_summary() -> None:
    report = analyze(kineto_trace("two_rank_job"))
    assert report.cross_rank is not None and report.cross_rank.ranks == 2
    assert [r.rank for r in report.ranks] == [0, 1]
    times = {r.rank: r.step_time_us for r in report.ranks}
    assert report.cross_rank.slowest_rank == max(times, key=lambda k: times[k])
    assert report.cross_rank.step_time_spread == pytest.approx(max(times.values()) / min(times.values()) - 1, abs=1e-4)
    assert report.rank == report.cross_rank.slowest_rank


@pytest.mark.parametrize("path", sorted(KINETO.rglob("*.json.gz")), ids=lambda p: p.name)
def test_every_real_trace_analyses_and_round_trips(path) -> None:
    from stepscope.model.report import from_json, to_json

    report = analyze(path)
    assert report.steps and report.summary.step_time_us
    assert from_json(to_json(report)) == report
