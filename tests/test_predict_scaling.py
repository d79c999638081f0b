"""Per-kernel scaling, checked against hand computation from the datasheet figures in docs/hardware.md, and the
properties that must hold whatever the figures: a faster roof never makes a kernel slower."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepscope.hardware import load_table
from stepscope.predict.gpus import Roofs, roof_pair, roofs
from stepscope.predict.scaling import FLOOR_NS, scale
from stepscope.predict.work import DTYPES, Bound, GpuWork

TABLE = load_table(use_user_file=False)


def _roofs(gpu: str) -> Roofs:
    return roofs(TABLE.gpu(gpu), TABLE)  # type: ignore[arg-type]


def _work(bound: list[int], dtype: list[str | None] | None = None, nbytes: list[float] | None = None) -> GpuWork:
    n = len(bound)
    codes = [DTYPES.index(d) if d else -1 for d in (dtype or [None] * n)]
    return GpuWork(rows=np.arange(n), bound=np.array(bound, dtype=np.int8), dtype=np.array(codes, dtype=np.int8),
                   flops=np.full(n, np.nan), bytes=np.array(nbytes if nbytes else [np.nan] * n, dtype=np.float64),
                   by_roofline=np.zeros(n, dtype=bool))


def test_memory_bound_kernel_h100_to_h200_scales_by_bandwidth() -> None:
    """100 µs memory-bound: 1.5 µs floor + 98.5 µs x 3350/4800 GB/s = 70.245 µs (no published bias for H200)."""
    out = scale(_work([Bound.MEMORY]), np.array([100_000]), _roofs("h100-sxm"), _roofs("h200"))
    assert out.dur.tolist() == [round(1_500 + 98_500 * 3350 / 4800)]


def test_compute_bound_kernel_scales_by_its_dtype_and_the_published_bias() -> None:
    """H100 -> L4, bf16 GEMM of 1 ms: 989.5/121 TF, times the bias ratio 0.67/0.51 (H100's kernels reach 0.67 of
    the roofline, the L4's 0.51): 1.5 + 998.5 x 8.178 x 1.3137 = 10.728 ms."""
    out = scale(_work([Bound.COMPUTE], ["bf16"]), np.array([1_000_000]), _roofs("h100-sxm"), _roofs("l4"))
    want = 1_500 + 998_500 * (989.5 / 121) * (0.67 / 0.51)
    assert out.dur[0] == pytest.approx(want, abs=1)
    assert any("0.67" in a and "0.51" in a for a in out.assumptions)


def test_fp32_and_tf32_matmuls_use_their_own_peaks() -> None:
    """H100 -> A100 SXM 80GB (no published A100 bias): fp32 67/19.5 TF; tf32 494.5/156 TF."""
    out = scale(_work([Bound.COMPUTE, Bound.COMPUTE], ["fp32", "tf32"]), np.array([101_500, 101_500]),
                _roofs("h100-sxm"), _roofs("a100-sxm-80gb"))
    assert out.dur[0] == pytest.approx(1_500 + 100_000 * 67 / 19.5, abs=1)
    assert out.dur[1] == pytest.approx(1_500 + 100_000 * 494.5 / 156, abs=1)


def test_a_dtype_the_target_lacks_falls_back_and_says_so() -> None:
    """A100 -> V100: no bf16 tensor cores on the V100, so bf16 runs at its FP32 rate (312 -> 15.7 TF)."""
    out = scale(_work([Bound.COMPUTE], ["bf16"]), np.array([101_500]), _roofs("a100-sxm-80gb"), _roofs("v100-sxm2"))
    assert out.dur[0] == pytest.approx(1_500 + 100_000 * 312 / 15.7, abs=1)
    assert any("bf16" in a and "FP32" in a for a in out.assumptions)


def test_latency_bound_kernel_scales_with_sms_times_clock() -> None:
    """H100 (132 SMs x 1980 MHz) -> A100 (108 x 1410): 1.5 + 48.5 µs x 1.7163."""
    out = scale(_work([Bound.LATENCY]), np.array([50_000]), _roofs("h100-sxm"), _roofs("a100-sxm-80gb"))
    assert out.dur[0] == pytest.approx(1_500 + 48_500 * (132 * 1980) / (108 * 1410), abs=1)


def test_kernels_under_the_floor_keep_their_time() -> None:
    out = scale(_work([Bound.MEMORY, Bound.COMPUTE, Bound.LATENCY], [None, "fp32", None]),
                np.array([1_000, 1_200, FLOOR_NS]), _roofs("h100-sxm"), _roofs("l4"))
    assert out.dur.tolist() == [1_000, 1_200, FLOOR_NS]


def test_host_copies_keep_a_host_bound_rate_and_slow_down_on_a_slower_link() -> None:
    """H100 (PCIe Gen5, 63 GB/s one way) -> L4 (Gen4, 31.5 GB/s). A 64 MB copy at 50 GB/s (1.28 ms) was
    link-bound: x 63/31.5 = 2.56 ms. The same bytes at 8 GB/s (pageable, 8 ms) were host-bound: unchanged."""
    nbytes = 64e6
    out = scale(_work([Bound.HOST_COPY, Bound.HOST_COPY], nbytes=[nbytes, nbytes]),
                np.array([1_280_000, 8_000_000]), _roofs("h100-sxm"), _roofs("l4"))
    assert out.dur[0] == pytest.approx(1_280_000 * 63 / 31.5, abs=1)
    assert out.dur[1] == 8_000_000


def test_collectives_scale_with_the_gpu_to_gpu_link_as_an_assumption() -> None:
    """V100 SXM2 (NVLink 2, 150 GB/s one way) -> H100 SXM (NVLink 4, 450 GB/s): a third of the time above the floor."""
    out = scale(_work([Bound.PEER]), np.array([3_001_500]), _roofs("v100-sxm2"), _roofs("h100-sxm"))
    assert out.dur[0] == pytest.approx(1_500 + 3_000_000 / 3, abs=1)
    assert any("assumption" in a for a in out.assumptions)


def test_the_same_gpu_changes_nothing() -> None:
    bound = [Bound.COMPUTE, Bound.MEMORY, Bound.LATENCY, Bound.HOST_COPY, Bound.PEER]
    dur = np.array([5_000_000, 80_000, 3_000, 1_000_000, 200_000])
    out = scale(_work(bound, ["bf16", None, None, None, None], nbytes=[np.nan, np.nan, np.nan, 5e7, np.nan]), dur,
                _roofs("h100-sxm"), _roofs("h100-sxm"))
    assert out.dur.tolist() == dur.tolist()


def test_measured_rates_are_used_only_when_both_gpus_have_them(tmp_path, monkeypatch) -> None:
    """The H200's measured rates ship with stepscope; the H100 has none: both stay on the datasheet, or the
    H200's own efficiency would pass for the H100's."""
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path))
    o, t = roof_pair(TABLE.gpu("h100-sxm"), TABLE.gpu("h200"), TABLE, "NVIDIA H100 80GB HBM3")  # type: ignore[arg-type]
    assert (o.basis, t.basis) == ("datasheet", "datasheet")
    assert t.bandwidth == 4800e9
    o, t = roof_pair(TABLE.gpu("h200"), TABLE.gpu("h200"), TABLE, "NVIDIA H200")  # type: ignore[arg-type]
    assert (o.basis, t.basis) == ("measured", "measured")
    assert t.bandwidth == pytest.approx(4202183321028.13)


def _faster(r: Roofs, f_compute: float, f_memory: float, f_simt: float) -> Roofs:
    return replace(r, flops={k: v * f_compute for k, v in r.flops.items()}, bandwidth=r.bandwidth * f_memory,
                   simt=r.simt * f_simt)


@settings(max_examples=200, deadline=None)
@given(
    durations=st.lists(st.integers(min_value=0, max_value=50_000_000), min_size=1, max_size=20),
    bounds=st.lists(st.sampled_from([Bound.COMPUTE, Bound.MEMORY, Bound.LATENCY]), min_size=20, max_size=20),
    dtypes=st.lists(st.sampled_from(["fp32", "tf32", "bf16", "fp16"]), min_size=20, max_size=20),
    factors=st.tuples(*(st.floats(min_value=1.0, max_value=10.0) for _ in range(3))),
    origin=st.sampled_from(["v100-sxm2", "a100-sxm-80gb", "h100-sxm", "l4"]),
    target=st.sampled_from(["v100-sxm2", "a100-sxm-80gb", "h100-sxm", "h200", "l4", "mi300x"]),
)
def test_a_faster_roof_never_makes_a_kernel_slower(durations, bounds, dtypes, factors, origin, target) -> None:
    n = len(durations)
    work = _work([int(b) for b in bounds[:n]], [d if b == Bound.COMPUTE else None for b, d in zip(bounds, dtypes[:n],
                                                                                                   strict=False)])
    dur = np.array(durations)
    base, fast = _roofs(target), _faster(_roofs(target), *factors)
    slow_out = scale(work, dur, _roofs(origin), base).dur
    fast_out = scale(work, dur, _roofs(origin), fast).dur
    assert (fast_out <= slow_out).all()
    # and a kernel is never predicted shorter than the floor it had
    assert (fast_out >= np.minimum(dur, FLOOR_NS)).all()


def test_wave_quantisation_from_the_grid() -> None:
    """A GEMM of 132 blocks, one per SM at a time: one full wave on an H100 (132 SMs); on an A100 (108 SMs) two
    waves, the second 24/108 full, so the peak ratio (which assumes full waves) understates it by
    (2 / (132/108)) / 1 = 1.636. A grid of 10,000 blocks fills nearly every wave on both: about 1."""
    w = _work([Bound.COMPUTE, Bound.COMPUTE], ["fp32", "fp32"])
    w = replace(w, blocks=np.array([132.0, 10_000.0]), blocks_per_sm=np.array([1.0, 1.0]))
    out = scale(w, np.array([101_500, 101_500]), _roofs("h100-sxm"), _roofs("a100-sxm-80gb"))
    plain = 100_000 * 67 / 19.5
    assert out.dur[0] == pytest.approx(1_500 + plain * 2 / (132 / 108), abs=2)
    quantised = (np.ceil(10_000 / 108) / (10_000 / 108)) / (np.ceil(10_000 / 132) / (10_000 / 132))
    assert out.dur[1] == pytest.approx(1_500 + plain * quantised, abs=2)
    assert quantised == pytest.approx(1.0, abs=0.01)
    # unknown grid: no correction
    unknown = replace(w, blocks=np.array([np.nan, 132.0]), blocks_per_sm=np.array([1.0, np.nan]))
    out = scale(unknown, np.array([101_500, 101_500]), _roofs("h100-sxm"), _roofs("a100-sxm-80gb"))
    assert out.dur.tolist() == [round(1_500 + plain)] * 2
