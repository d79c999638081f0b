"""Traces stepscope recorded on a real H100 and H200 (tests/data/gpu_*/MANIFEST.md), read without a GPU.

Each example was built so that one pattern dominates it on a GPU; the plain timings recorded beside the
traces (tests/data/gpu_h100/plain_timings.txt) show its fix removing that cost, which is the independent
reason the verdict must name that pattern.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import msgspec
import numpy as np
import pytest

from stepscope import analyze
from stepscope.model.report import Report

DATA = Path(__file__).parent / "data"
BIG_MATMUL_SCRIPT = Path(__file__).parent / "gpu" / "big_matmul.py"


@cache
def report(gpu: str, name: str) -> Report:
    return analyze(DATA / gpu / name / "trace.json.gz")


def raw_events(gpu: str, name: str) -> list[dict]:
    return json.loads(gzip.decompress((DATA / gpu / name / "trace.json.gz").read_bytes()))["traceEvents"]


@pytest.mark.parametrize(("gpu", "name", "pattern"), [
    # plain: 24.0 ms/step with workers 0, 3.8 ms with 8 workers
    ("gpu_h100", "input_bound", "input_bound"), ("gpu_h200", "input_bound", "input_bound"),
    # plain: 8.3 ms/step with pageable float32 batches, 2.2 ms pinned and uint8
    ("gpu_h100", "copy_bound", "copy_bound"), ("gpu_h200", "copy_bound", "copy_bound"),
    # ~3,800 tiny ops per step: 49 ms of host time for ~5 ms of kernels
    ("gpu_h100", "launch_bound", "launch_bound"), ("gpu_h200", "launch_bound", "launch_bound"),
    # plain: 28.2 ms/step with the numpy metrics on the host, 4.3 ms with them on the device
    ("gpu_h100", "cpu_compute_bound", "cpu_compute_bound"),
    # big matrix products and nothing else: the kernels are the step
    ("gpu_h200", "gpu_compute_bound", "gpu_compute_bound"),
    ("gpu_h100", "big_matmul", "gpu_compute_bound"), ("gpu_h200", "big_matmul", "gpu_compute_bound"),
    ("gpu_h200", "big_matmul_bf16", "gpu_compute_bound"), ("gpu_h200", "transformer_block", "gpu_compute_bound"),
    # round 4 (after the overhead correction landed): the H100 gpu_compute_bound example, and rung 1 of the
    # walk-through (plain: 840 samples/s with workers 0, 1,467 with 8 workers)
    ("gpu_h100/r4_runs", "gpu_compute_bound", "gpu_compute_bound"), ("gpu_h100/r4_runs", "cifar_rung1", "input_bound"),
])
def test_each_example_gets_the_verdict_it_was_built_for(gpu: str, name: str, pattern: str) -> None:
    r = report(gpu, name)
    assert r.device is not None and r.device.name.startswith("NVIDIA H")
    assert r.patterns and r.patterns[0].id == pattern, [(p.id, p.share) for p in r.patterns]


def _known_line() -> int:
    lines = BIG_MATMUL_SCRIPT.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if "# the big matmul" in text)


@pytest.mark.parametrize("gpu", ["gpu_h100", "gpu_h200"])
def test_the_big_matmul_line_holds_its_kernels_forward_and_backward(gpu: str) -> None:
    """tests/gpu/big_matmul.py puts all but ~0.1% of the FLOPs on one line: `h = x @ self.w_big`, one GEMM
    forward and one backward (the weight's gradient; the input needs none). The raw file's GEMM kernels
    over 1 ms are those two per step; the line must hold their time, forward and backward apart."""
    r = report(gpu, "big_matmul")
    line = _known_line()
    row = next(x for x in r.lines.rows if x.file == "tests/gpu/big_matmul.py" and x.line == line)
    big = [e["dur"] for e in raw_events(gpu, "big_matmul") if e.get("cat") == "kernel" and e["dur"] > 1000]
    gemm_us = float(np.median(big))
    assert row.gpu_fwd_us == pytest.approx(gemm_us, rel=0.02)
    assert row.gpu_bwd_us == pytest.approx(gemm_us, rel=0.02)
    assert row.kernels == 2
    assert (row.gpu_fwd_us + row.gpu_bwd_us) / r.kernels.time_us_per_step > 0.95
    assert r.lines.rows[0].line == line  # the line that costs the most


@pytest.mark.parametrize("gpu", ["gpu_h100", "gpu_h200"])
def test_nvml_telemetry_of_a_real_gpu(gpu: str) -> None:
    """NVML read during the run: utilisation, memory, power and clocks per sample, within what the device can
    do (700 W board power limit, 1980 MHz max SM clock)."""
    doc = json.loads((DATA / gpu / "big_matmul" / "telemetry.json").read_text())
    assert doc["schema"] == "stepscope.telemetry/1" and doc["gpus"][0].startswith("NVIDIA H")
    gpu_samples = [s["gpu"][0] for s in doc["samples"] if s.get("gpu")]
    assert len(gpu_samples) >= 5
    assert max(s["util"] for s in gpu_samples) > 50  # the matmul loop kept it busy
    assert all(50 < s["power_w"] <= 700 and 0 < s["sm_clock_mhz"] <= 1980 for s in gpu_samples)
    assert max(s["mem_used_bytes"] for s in gpu_samples) > 1_410_073_600  # at least torch's own peak allocation


@pytest.mark.parametrize("name", ["big_matmul", "gpu_compute_bound"])
def test_fp32_matmuls_with_tf32_off_use_no_tensor_cores(name: str) -> None:
    """PyTorch leaves TF32 off for matmuls by default, so these fp32 runs' GEMMs ran on the CUDA cores:
    cuBLAS's `..._ffma` xmma kernels (fused FP32 multiply-adds) and CUTLASS SIMT sgemms. Their kernel time is
    not tensor-core time, and the recorded plain runs agree: --tf32 made gpu_compute_bound 3.9x faster
    (48.3 -> 190 TFLOP/s, plain_timings.txt)."""
    r = report("gpu_h100", name)
    names = [k.name for k in r.kernels.top if "gemm" in k.name]
    assert names and all(("ffma" in n or "simt_sgemm" in n) for n in names)
    assert r.kernels.tensor_core_share == pytest.approx(0.0, abs=0.01)


def test_cudnn_fused_attention_kernels_count_as_half_precision_matmuls() -> None:
    """The transformer block's attention ran in cuDNN's fused SDPA kernels (`..._sdpa_sm90_flash_fprop_wgmma_f16_...`
    and `..._flash_bprop_...`): matrix products on tensor cores in fp16, under bf16 autocast."""
    from stepscope.analysis.precision import is_matmul_kernel, precision

    names = {e["name"] for e in raw_events("gpu_h200", "transformer_block") if e.get("cat") == "kernel"
             and "_sdpa_" in e["name"]}
    assert len(names) == 2
    assert all(is_matmul_kernel(n) and precision(n) == "half" for n in names)


def test_energy_per_step_from_the_run_telemetry_of_a_real_gpu() -> None:
    """J per step is the window's mean NVML power times the unprofiled step: on the H100 launch_bound run,
    122.43 W (telemetry.json window) x 50.388 ms (unprofiled step, run.json) = 6.17 J. The pipeline fills it
    into the run section; the terminal shows it."""
    from stepscope.model.report import Run
    from stepscope.pipeline import analyze
    from stepscope.report.tables import run_summary
    from stepscope.trace.kineto import read_kineto

    folder = DATA / "gpu_h100" / "launch_bound"
    doc = json.loads((folder / "run.json").read_text())
    fields = set(Run.__struct_fields__) - {"energy_per_step"}
    run = msgspec.convert({k: v for k, v in doc.items() if k in fields}, Run)
    r = analyze([read_kineto(folder / "trace.json.gz")], run=run)
    [energy] = r.run.energy_per_step
    assert (energy.gpu, energy.basis) == (0, "unprofiled step time")
    assert energy.joules == pytest.approx(122.43 * 50.388e-3, abs=0.01)
    gpu_line = next(line for line in run_summary(r) if line.startswith("GPU 0"))
    assert "~6.17 J per step (mean power x unprofiled step time)" in gpu_line
