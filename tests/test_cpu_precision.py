"""bf16 autocast on a CPU estimated from the ops' sizes and the casts they add (issue 41.2), on planted traces:
a CPU with AMX (planted settings), a 2-thread 2.6 GHz AVX-512 census (fp32 peak 2 x 2.6e9 x 64 = 332.8 GFLOP/s)."""

from __future__ import annotations

from pathlib import Path

import pytest

import builder as sc
from stepscope.advice.context import Context
from stepscope.advice.cpu_precision import CAST_BYTES_PER_FP32_BYTE, CAST_BYTES_PER_S
from stepscope.advice.patterns import classify
from stepscope.advice.rules import cpu as rules_cpu
from stepscope.advice.rules.cpu import BF16_FACTOR
from stepscope.analysis.facts import compute_facts
from stepscope.model import report as s
from stepscope.trace.census import CpuInfo, RunCensus
from stepscope.trace.kineto import read_kineto

PEAK = 2 * 2.6e9 * 64
AMX = s.Settings(cpu_cores=2, intra_op_threads=2, cpu_capability="AVX512", cpu_bf16="amx_bf16", autocast="off",
                 compiled=False, channels_last=True, conv_layers=1)


def run() -> s.Run:
    return s.Run(command=[], status="window recorded", exit_code=0, step_source="optimizer", skip=5, warmup=2,
                 steps_requested=5, steps_recorded=4, first_recorded_step=0, batch_size=None,
                 batch_size_source=None, profiled_device="cpu", profiler_overhead=None,
                 unprofiled_step_us=None, recorded_step_us=None, settings=AMX)


def conv_step(tmp_path: Path, batch: int, conv_us: float, views: int = 0,
              shapes_recorded: bool = True) -> tuple[Context, list[s.Pattern]]:
    """Four steps of one 3x3 convolution of 512 -> 512 channels on 4 x 4 maps (ResNet-18's layer4 at 32 px), in
    `conv_us`, and 2 ms of Python; `views` 1 µs aten::view ops before it in each step."""
    b, tl = sc.scenario(device_name=None)
    shapes = {"Input Dims": [[batch, 512, 4, 4], [512, 512, 3, 3], [], [], [], [], []],
              "Input type": ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
              "Concrete Inputs": ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"]}
    for i in range(4):
        with tl.step(i):
            for _ in range(views):
                b.op("aten::view", tl.t, tl.t + 1.0)
                tl.t += 1.0
            start = tl.t
            tl.t += conv_us
            b.op("aten::conv2d", start, tl.t, **(shapes if shapes_recorded else {}))
            tl.idle(2000.0)
    facts = compute_facts(read_kineto(b.write(tmp_path / f"t{views}{shapes_recorded}.json")),
                          census=RunCensus(cpu=CpuInfo(threads=2, max_mhz=2600.0, simd="avx512")))
    ctx = Context(facts, run())
    return ctx, classify(facts, ctx)


def expected(ctx: Context, batch: int, conv_us: float) -> float:
    """By hand: FLOPs 2 x batch x 16 x (512 x 512 x 9); fp32 bytes: input and output batch x 512 x 16 x 4 each, the
    weight 512 x 512 x 9 x 4. The math's share of the time is the FLOP rate over the peak; it runs 2.5x faster; the
    casts move 3x the fp32 bytes at CAST_BYTES_PER_S."""
    flops = 2.0 * batch * 16 * 512 * 512 * 9
    nbytes = 2 * batch * 512 * 16 * 4 + 512 * 512 * 9 * 4
    conv_ns = conv_us * 1e3
    at_peak = min(flops / conv_ns * 1e9 / PEAK, 1.0)
    saved = conv_ns * at_peak * (1 - 1 / BF16_FACTOR["amx_bf16"])
    cast = CAST_BYTES_PER_FP32_BYTE * nbytes / CAST_BYTES_PER_S * 1e9
    return ctx.step_ns / (ctx.step_ns - saved + cast)


def test_the_demos_small_convolutions_pay_more_for_the_casts_than_bf16_saves(tmp_path: Path) -> None:
    """Batch 16: 1.21 GFLOP in 10 ms is 121 GFLOP/s, 36% of the peak: 10 x 0.363 x 0.6 = 2.18 ms saved; the casts
    move 3 x 10.5 MB = 31.5 MB: 4.49 ms at 7 GB/s. The step grows: considered, not recommended, with its estimate."""
    ctx, patterns = conv_step(tmp_path, 16, 10_000.0)
    (left_out,) = rules_cpu.cpu_bf16(ctx, patterns)
    assert isinstance(left_out, s.Considered) and left_out.id == "cpu_bf16"
    want = expected(ctx, 16, 10_000.0)
    assert want < 0.9
    assert f"estimated {want:.2f}x" in left_out.reason and "casts move 31 MB" in left_out.reason


def test_big_convolutions_gain_past_their_casts(tmp_path: Path) -> None:
    """Batch 256: 19.3 GFLOP in 100 ms, 58% of the peak: 34.8 ms saved; the casts move 3 x 26.2 MB: 11.2 ms."""
    ctx, patterns = conv_step(tmp_path, 256, 100_000.0)
    (rec,) = rules_cpu.cpu_bf16(ctx, patterns)
    assert isinstance(rec, s.Recommendation)
    assert rec.estimated_speedup == pytest.approx(expected(ctx, 256, 100_000.0), abs=0.006)
    assert rec.estimated_speedup > 1.2
    assert rec.evidence["cast_bytes_per_step"] == 3 * (2 * 256 * 512 * 16 * 4 + 512 * 512 * 9 * 4)


def test_without_the_ops_sizes_bf16_is_not_priced(tmp_path: Path) -> None:
    b, tl = sc.scenario(device_name=None)
    for i in range(4):
        with tl.step(i):
            tl.cpu("aten::mkldnn_convolution", 9000.0)
            tl.idle(1000.0)
    facts = compute_facts(read_kineto(b.write(tmp_path / "t.json")))
    ctx = Context(facts, run())
    (left_out,) = rules_cpu.cpu_bf16(ctx, classify(facts, ctx))
    assert isinstance(left_out, s.Considered) and "sizes" in left_out.reason


def test_a_live_captures_timeline_from_another_trace_prices_the_recorded_ops(tmp_path: Path) -> None:
    """A live capture's facts hold the timing pass's trace and the recorded pass's FLOPs (pipeline/timeline): the
    ops are priced from the trace they were counted in, whatever trace the facts read the steps from (the demo's
    run once failed with an IndexError here: the recorded pass's rows indexed into the shorter timing trace)."""
    import dataclasses

    recorded, patterns = conv_step(tmp_path, 256, 100_000.0, views=40)
    timing, _ = conv_step(tmp_path, 256, 100_000.0, shapes_recorded=False)  # the same steps without the views
    assert len(timing.facts.trace.events) < int(recorded.facts.flops.rows.max())
    mixed = Context(dataclasses.replace(timing.facts, flops=recorded.facts.flops), run())
    (rec,) = rules_cpu.cpu_bf16(mixed, patterns)
    assert isinstance(rec, s.Recommendation)
    assert rec.estimated_speedup == pytest.approx(expected(mixed, 256, 100_000.0), rel=0.01)
