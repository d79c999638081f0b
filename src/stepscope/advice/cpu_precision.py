"""bf16 autocast on a CPU, estimated from what the ops are (issue 41.2): each fp32 matmul and convolution's FLOPs
and its measured time, and the casts autocast adds around it.

An op gains from bf16 only in the part of its time that is math at the CPU's peak: its measured FLOP rate against
the fp32 peak (analysis/utilization.cpu_peak) is that part (a small convolution that reaches 10% of the peak is
mostly dispatch, memory and threading, which bf16 does not shorten); that part runs `factor` times faster (the bf16
peak over the fp32 one: BF16_FACTOR in rules/cpu.py). Autocast adds casts: each forward matmul and convolution reads
its inputs, weights and output as fp32 and writes them as bf16 (4 + 2 bytes an element: 1.5x the op's fp32 bytes),
and the backward casts the gradients back as often: CAST_BYTES_PER_FP32_BYTE x the forward ops' fp32 bytes a step,
at CAST_BYTES_PER_S. The estimate may be under 1x: small convolutions pay more for the casts than they gain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.advice.context import Context

# Bytes the casts move per byte of the forward matmuls' and convolutions' fp32 operands: read fp32 + write bf16
# (1.5 per fp32 byte) in the forward, and as much again for the gradients in the backward.
CAST_BYTES_PER_FP32_BYTE = 3.0
# A cast's bytes (read + write) per second on one core: `x.to(torch.bfloat16)` of fresh fp32 tensors, measured by
# `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_casts.py` on this project's 2-core Xeon (AMX), shared with
# other jobs, 2026-12, two runs: 1 MiB 5.5 and 17.7 GB/s, 4 MiB 16.9 and 21.2, 16 MiB 3.3 and 3.7 (a fresh output
# that large is new pages, faulted in). ResNet-18's weights are 0.1-9.4 MB each: a rate between, to be re-measured
# on a quiet machine.
CAST_BYTES_PER_S = 7.0e9


@dataclass(frozen=True)
class Bf16Ops:
    """The fp32 matmuls and convolutions of a step, and what bf16 autocast would change of them (per step)."""

    ops: int  # matmul and convolution ops a step (forward and backward)
    time_ns: float  # their measured time
    flops: float
    at_peak: float  # the share of their time that is math at the fp32 peak (their FLOP rate / the peak)
    saved_ns: float  # that share's time less its bf16 time
    cast_bytes: float
    cast_ns: float

    @property
    def gain_ns(self) -> float:
        return self.saved_ns - self.cast_ns


def bf16_ops(ctx: Context, factor: float) -> Bf16Ops | None:
    """The step's fp32 matmuls and convolutions priced in bf16; None without their sizes (record_shapes) or the
    CPU's peak."""
    facts = ctx.facts
    fc, util = facts.flops, facts.utilization
    if fc is None or not fc.shapes_recorded or util is None or util.cpu_peak is None or not fc.step_count:
        return None
    pick = np.array([k in ("conv", "matmul") and d == "fp32" for k, d in zip(fc.kind, fc.dtype, strict=True)],
                    dtype=bool)
    if not pick.any():
        return None
    steps = fc.step_count
    dur = fc.dur[pick]  # the counted trace's own (a live capture's recorded pass: its ops as profiled)
    flops = fc.flops[pick]
    at_peak = np.minimum(flops / np.maximum(dur, 1.0) * 1e9 / util.cpu_peak.flops_per_s, 1.0)
    saved = float((dur * at_peak).sum()) * (1 - 1 / factor) / steps
    forward_bytes = float(fc.bytes[pick][~fc.backward[pick]].sum()) / steps
    cast_bytes = CAST_BYTES_PER_FP32_BYTE * forward_bytes
    time_ns = float(dur.sum()) / steps
    return Bf16Ops(ops=round(int(pick.sum()) / steps), time_ns=time_ns, flops=float(flops.sum()) / steps,
                   at_peak=float((dur * at_peak).sum() / max(dur.sum(), 1.0)), saved_ns=saved,
                   cast_bytes=cast_bytes, cast_ns=cast_bytes / CAST_BYTES_PER_S * 1e9)
