"""`stepscope diff` carries MFU and the memory peaks of both runs."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from stepscope.compare import compare
from stepscope.pipeline import analyze
from stepscope.report.diff import DiffTerminalRenderer

DATA = Path(__file__).parent / "data"


def test_diff_of_mfu_and_peak_memory() -> None:
    before = analyze(DATA / "gpu_h100" / "big_matmul" / "trace.json.gz")
    after = analyze(DATA / "gpu_h200" / "big_matmul_bf16" / "trace.json.gz")
    diff = compare(before, after)
    assert diff.before.mfu == before.utilization.mfu and diff.after.mfu == after.utilization.mfu
    assert diff.before.peak_allocated_bytes == 1410073600  # max_memory_allocated on the H100 (MANIFEST)
    assert diff.after.peak_allocated_bytes == 2752381952  # and on the H200
    assert diff.after.model_flops_per_step > 7 * diff.before.model_flops_per_step
    buffer = io.StringIO()
    Console(file=buffer, width=120, color_system=None).print(DiffTerminalRenderer().render(diff))
    text = buffer.getvalue()
    assert f"MFU {100 * before.utilization.mfu:.1f}% -> {100 * after.utilization.mfu:.1f}%" in text
    assert "peak memory allocated 1.4 GB -> 2.8 GB" in text
