"""MFU, the roofline and the memory peak on real traces recorded by stepscope on an H100 and an H200
(tests/data/gpu_h100, tests/data/gpu_h200; MANIFEST.md in each). The ground truth: the FLOPs of the known
matrix products by hand, and `torch.cuda.max_memory_allocated` as the scripts printed it on the GPU machine."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest

from stepscope.analysis.facts import compute_facts
from stepscope.pipeline import analyze
from stepscope.trace.kineto import read_kineto

DATA = Path(__file__).parent / "data"


@lru_cache(maxsize=8)
def facts_of(folder: str):
    return compute_facts(read_kineto(DATA / folder / "trace.json.gz"))


def manifest_max_allocated(gpu: str, folder: str) -> int:
    """The `max_memory_allocated N bytes` the run's script printed, as written in the MANIFEST."""
    text = (DATA / gpu / "MANIFEST.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith(f"| `{folder}`"))
    return int(re.search(r"max_memory_allocated (\d+) bytes", row).group(1))


def test_bf16_matmul_loop_mfu_on_the_h200() -> None:
    """big_matmul --dtype bfloat16 --width 16384 --batch-size 8192: x @ w_big forward and w_big's gradient
    backward (x needs none), plus a 10-class head: 3 x 2 x 8192 x 16384 x 10 more."""
    u = facts_of("gpu_h200/big_matmul_bf16").utilization
    big = 2 * 8192 * 16384 * 16384
    head = 2 * 8192 * 16384 * 10
    assert u.forward_flops == pytest.approx(big + head, rel=0.02)
    assert u.backward_flops == pytest.approx(big + 2 * head, rel=0.02)
    assert set(u.flops_by_dtype) == {"bf16"}
    assert u.spec.spec.id == "h200" and u.peaks[0].flops_per_s == 989.5e12 and u.peaks[0].source == "nv-h200-ds"
    assert u.mfu > 0.60
    # The measured achievable bf16 rate shipped with stepscope (778.1 TFLOP/s) gives the larger share.
    assert u.mfu_of_achievable == pytest.approx(u.mfu * 989.5 / 778.109, rel=1e-3)


def test_fp32_matmul_on_the_h100_uses_the_fp32_peak() -> None:
    """The H100 big_matmul ran plain FP32 (SIMT sgemm kernels, TF32 off): its peak is 67 TF, not TF32's."""
    u = facts_of("gpu_h100/big_matmul").utilization
    big = 2 * 4096 * 8192 * 8192
    head = 2 * 4096 * 8192 * 10
    assert u.forward_flops == pytest.approx(big + head, rel=0.02)
    assert u.backward_flops == pytest.approx(big + 2 * head, rel=0.02)
    assert set(u.flops_by_dtype) == {"fp32"}
    assert u.spec.spec.id == "h100-sxm" and [p.dtype for p in u.peaks] == ["fp32"]
    step_s = facts_of("gpu_h100/big_matmul").steps.duration.mean() * 1e-9
    assert u.mfu == pytest.approx((u.forward_flops + u.backward_flops) / step_s / 67e12, rel=1e-6)
    assert 0.5 < u.mfu < 1


def test_transformer_block_flops_and_coverage() -> None:
    """tests/gpu/transformer_block.py: 4 blocks, d 1024, 16 heads, batch 16 x 1024 tokens, vocab 8192, bf16
    autocast. Per block 24 N d^2 in linears and 4 B T^2 d in attention; the head 2 N d V; backward twice."""
    u = facts_of("gpu_h200/transformer_block").utilization
    n, d, t, b, vocab = 16 * 1024, 1024, 1024, 16, 8192
    forward = 4 * (24 * n * d * d + 4 * b * t * t * d) + 2 * n * d * vocab
    assert u.forward_flops == pytest.approx(forward, rel=0.02)
    assert u.backward_flops == pytest.approx(2 * forward, rel=0.02)
    assert set(u.flops_by_dtype) == {"bf16"}  # autocast: the linears' math is bf16, though called with fp32
    assert 0.9 < u.covered_share < 1
    assert "aten::_fused_adamw_" in dict(u.uncovered)  # its tensor lists carry no dtype: uncovered, not zero
    matmuls = [p for p in u.roofline.points if p.kind == "matmul" and p.time_ns > 500_000]
    assert matmuls and all(p.roof == "compute" for p in matmuls)
    shares = sum(c.share for c in u.roofline.classes)
    assert shares == pytest.approx(1.0)


@pytest.mark.parametrize(("gpu", "folder"), [("gpu_h100", "big_matmul"), ("gpu_h200", "big_matmul_bf16"),
                                             ("gpu_h200", "transformer_block")])
def test_memory_peak_against_max_memory_allocated(gpu: str, folder: str) -> None:
    facts = facts_of(f"{gpu}/{folder}")
    (peak,) = facts.memory_peaks
    expected = manifest_max_allocated(gpu, folder)
    assert peak.peak_allocated == pytest.approx(expected, rel=0.10)
    assert sum(c.bytes for c in peak.categories) == peak.peak_allocated
    assert peak.peak_reserved >= peak.peak_allocated


def test_activation_lines_of_the_transformer_block() -> None:
    """The MLP line holds the most activation memory: fc1's and GELU's outputs (B T 4d each, per block)."""
    report = analyze(DATA / "gpu_h200" / "transformer_block" / "trace.json.gz", batch_size=16)
    device = report.memory_usage.devices[0]
    source = (Path(__file__).parent / "gpu" / "transformer_block.py").read_text().splitlines()
    mlp_line = next(i for i, text in enumerate(source, 1) if "self.fc2(F.gelu(self.fc1(" in text)
    assert device.activation_lines[0].line == mlp_line
    assert device.activation_lines[0].bytes >= 4 * 2 * (16 * 1024 * 4096 * 2)  # fc1 out + GELU out, bf16
    room = device.headroom
    assert room.batch_size == 16 and room.max_batch > 16 and room.margin == 0.05
    # The estimate's own arithmetic: fixed + per-sample x batch fits in 95% of the device less the rest.
    fits = (room.fixed_bytes + room.per_sample_bytes * room.max_batch) * room.fragmentation
    assert fits <= 0.95 * room.capacity_bytes
    assert (room.fixed_bytes + room.per_sample_bytes * (room.max_batch + 1)) * room.fragmentation > (
        0.95 * room.capacity_bytes)


def test_report_sections_render() -> None:
    from stepscope.report import render

    report = analyze(DATA / "gpu_h200" / "big_matmul_bf16" / "trace.json.gz")
    u = report.utilization
    assert u.hardware_row == "h200" and u.peaks[0].document.startswith("NVIDIA H200")
    html = render("html", report).decode()
    assert 'id="fig-utilization"' in html and 'id="fig-memory-usage-0"' in html and "nv-h200-ds" in html
    import io

    from rich.console import Console

    from stepscope.report.terminal import render_terminal

    buffer = io.StringIO()
    render_terminal(report, Console(file=buffer, width=140, color_system=None))
    text = buffer.getvalue()
    assert f"MFU {100 * u.mfu:.1f}%" in text and "989.5 TFLOP/s [nv-h200-ds" in text


UTILIZATION_FIELDS = {
    "device", "hardware_row", "hardware_name", "match_note", "devices", "model_flops_per_step",
    "forward_flops_per_step", "backward_flops_per_step", "recompute_flops_per_step", "flops_by_dtype",
    "achieved_tflops", "mfu", "hfu", "mfu_of_achievable", "why_no_mfu", "peaks", "cpu_peak_gflops", "cpu_peak_how",
    "shapes_recorded", "covered_share", "uncovered", "roofline",
}
ROOFLINE_FIELDS = {"peak_tflops", "bandwidth_gb_s", "achievable_tflops", "achievable_gb_s", "kernel_us_per_step",
                   "covered_share", "classes", "points", "left_out"}
POINT_FIELDS = {"kernel", "op", "kind", "dtype", "count_per_step", "time_us_per_step", "share", "tflops", "gb_s",
                "intensity", "roof", "roof_share"}
MEMORY_FIELDS = {"device", "peak_allocated_bytes", "peak_reserved_bytes", "reserved_gap_bytes", "phase",
                 "peak_step", "categories", "outside_count", "counts_from_profiler_start", "nvml_used_max_bytes",
                 "non_pytorch_bytes", "activation_lines", "headroom", "timeline_ms", "timeline_allocated",
                 "timeline_reserved"}


def test_section_field_names_are_stable() -> None:
    """The new sections' JSON fields (stepscope.report/1): added to, never renamed."""
    import json

    from stepscope.model.report import to_json

    doc = json.loads(to_json(analyze(DATA / "gpu_h200" / "transformer_block" / "trace.json.gz", batch_size=16)))
    u = doc["utilization"]
    assert set(u) >= UTILIZATION_FIELDS and set(u["roofline"]) >= ROOFLINE_FIELDS
    assert set(u["roofline"]["points"][0]) >= POINT_FIELDS
    assert set(u["peaks"][0]) >= {"dtype", "tflops", "source", "document", "url", "achievable_tflops"}
    device = doc["memory_usage"]["devices"][0]
    assert set(device) >= MEMORY_FIELDS
    assert set(device["headroom"]) >= {"batch_size", "max_batch", "fixed_bytes", "per_sample_bytes",
                                       "capacity_bytes", "fragmentation", "margin"}
