"""The tutorial's V100 ResNet-50 trace (tests/data/tutorial_v100_resnet50: record_shapes, profile_memory, with_stack):
FP32 convolutions on a tensor-core GPU with no tensor-core use; an expert names AMP (issue 41, item 1).

The loop loads its batches in the main process (60-70 ms a batch): while it does, the device's work done sooner
cannot shorten the step, and AMP alone replays at about 1.0x. Once the batches load in workers (the first fix), the
step is the GPU's FP32 work, and AMP is the next: recommended right after `dataloader_workers`, its gain measured
against the step with the workers. The bounds below come from the raw trace: the kernels' time per step, and that
time with the FP32 convolutions and matmuls 3x faster (AMP_FACTOR's fp32), is the most AMP can gain (a host that
costs nothing); the gain is at least 1.3x only if the host's own work after the loader's change is under the GPU's
FP32 work / 1.3."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from stepscope.advice.whatif import AMP_FACTOR
from stepscope.pipeline import analyze

TRACE = Path(__file__).parent / "data" / "tutorial_v100_resnet50" / "worker0.1623143089861.pt.trace.json.gz"


def kernel_time_per_step() -> tuple[float, float]:
    """From the raw JSON: the kernels' µs per ProfilerStep, and the share of it in convolution and GEMM kernels."""
    with gzip.open(TRACE) as f:
        events = json.loads(f.read())["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name", "").startswith("ProfilerStep#")]
    kernels = [e for e in events if e.get("cat") == "Kernel" and any(a <= e["ts"] < b for a, b in steps)]
    total = sum(e["dur"] for e in kernels)
    def is_conv(name: str) -> bool:  # cuDNN's convolution kernels (scudnn, wgrad, dgrad) and GEMMs, not its batch norms
        return "bn_" not in name and any(k in name for k in ("conv", "gemm", "scudnn", "wgrad", "dgrad"))

    conv = sum(e["dur"] for e in kernels if is_conv(e["name"].lower()))
    return total / len(steps), conv / total


def test_amp_is_recommended_after_the_loader_above_1_3x() -> None:
    per_step_us, conv_share = kernel_time_per_step()
    assert 85_000 < per_step_us < 110_000 and conv_share > 0.6  # the "85-100 ms of FP32 GPU work", ~70% convs
    bound = 1 / ((1 - conv_share) + conv_share / AMP_FACTOR["fp32"])  # the host costing nothing
    report = analyze(TRACE)
    ids = [r.id for r in report.recommendations]
    amp = report.recommendations[ids.index("amp")]
    assert amp.after == "dataloader_workers" and ids.index("amp") == ids.index("dataloader_workers") + 1
    assert 1.3 < (amp.estimated_speedup or 0) <= bound * 1.02
    assert "after the batches load in workers" in amp.estimate and amp.title.startswith("Once the batches load")
