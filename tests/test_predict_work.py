"""What bounds each GPU activity: by name (kernel names taken from our own H100/H200 traces), by kind for copies,
and by the roofline when FLOPs and bytes are handed over (the seam for the utilisation analyses)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder import TraceBuilder
from stepscope.hardware import load_table
from stepscope.predict.gpus import roofs
from stepscope.predict.work import DTYPES, SHORT_NS, Bound, gpu_work, matmul_dtype
from stepscope.trace.kineto import read_kineto

TABLE = load_table(use_user_file=False)
H100 = roofs(TABLE.gpu("h100-sxm"), TABLE)  # type: ignore[arg-type]

# Names as they appear in tests/data/gpu_h100 and gpu_h200 traces.
FP32_XMMA = ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_"
             "execute_kernel__5x_cublas")
FP32_SIMT = ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>"
             "(cutlass_80_simt_sgemm_256x128_8x4_nt_align1::Params)")
TF32_WGRAD = ("sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_"
              "warpgroupsize1x1x1")
FP16_FPROP = "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1"
BF16_CUTLASS = ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_32x3_tn_align2>"
                "(cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_32x3_tn_align2::Params)")
NVJET = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT"
FLASH = "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0"
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >"
       "(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)")
ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<3>, at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata>")
LAYOUT = ("void cudnn::engines_precompiled::nchwToNhwcKernel<__half, __half, float, false, true, "
          "(cudnnKernelDataType_t)0>")
BN = "void cudnn::bn_bw_1C11_kernel_new<__half, float, float2, 128, true, 1>(float, float, float, float)"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


@pytest.mark.parametrize(("name", "dtype"), [
    (FP32_XMMA, "fp32"), (FP32_SIMT, "fp32"), (TF32_WGRAD, "tf32"), (FP16_FPROP, "fp16"), (BF16_CUTLASS, "bf16"),
    (NVJET, "fp16"), (FLASH, "fp16"),
])
def test_matmul_dtype_from_the_name(name: str, dtype: str) -> None:
    assert matmul_dtype(name) == dtype


def _kernels(tmp_path: Path, names: list[str], us: float = 100.0, **extra: float) -> list[tuple[int, int]]:
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3", sm_count=132)
    t = 0.0
    b.step(0, 0, 100_000)
    for name in names:
        b.launch(name, (t, t + 5), (t + 10, t + 10 + us))
        t += us + 20
    trace = read_kineto(b.write(tmp_path / "k.json"))
    work = gpu_work(trace, 0, H100, **extra)
    return list(zip(work.bound.tolist(), work.dtype.tolist(), strict=True))


def test_classes_by_name(tmp_path: Path) -> None:
    got = _kernels(tmp_path, [FP32_XMMA, TF32_WGRAD, BF16_CUTLASS, FLASH, ADD, ADAM, LAYOUT, BN, NCCL])
    fp32, tf32, bf16, fp16 = (DTYPES.index(d) for d in ("fp32", "tf32", "bf16", "fp16"))
    assert got == [(Bound.COMPUTE, fp32), (Bound.COMPUTE, tf32), (Bound.COMPUTE, bf16), (Bound.COMPUTE, fp16),
                   (Bound.MEMORY, -1), (Bound.MEMORY, -1), (Bound.MEMORY, -1), (Bound.LATENCY, -1),
                   (Bound.PEER, -1)]


def test_short_kernels_are_latency_bound(tmp_path: Path) -> None:
    got = _kernels(tmp_path, [ADD, FP32_XMMA], us=SHORT_NS / 1000 - 1)
    assert [b for b, _ in got] == [Bound.LATENCY, Bound.LATENCY]


def test_copies_by_kind(tmp_path: Path) -> None:
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    b.step(0, 0, 1000)
    b.copy("HtoD", (0, 10), (5, 50), nbytes=1 << 20, host="Pinned")
    b.copy("DtoH", (60, 70), (65, 90), nbytes=1 << 20)
    b.copy("DtoD", (100, 110), (105, 190), nbytes=1 << 20)
    b.memset(200, 210, correlation=b.runtime("cudaMemsetAsync", 195, 199))
    trace = read_kineto(b.write(tmp_path / "c.json"))
    work = gpu_work(trace, 0, H100)
    assert work.bound.tolist() == [Bound.HOST_COPY, Bound.HOST_COPY, Bound.MEMORY, Bound.MEMORY]
    assert work.bytes.tolist()[:3] == [1 << 20] * 3


def test_flops_and_bytes_handed_over_decide_by_the_roofline(tmp_path: Path) -> None:
    """The seam: with FLOPs and bytes per row, the H100's roofs decide. A 100 µs kernel of 1e12 fp32 FLOPs and 1 MB
    needs 14.9 µs at 67 TF: compute-bound. One with 300 MB (89.6 µs at 3.35 TB/s) and 1e9 FLOPs: memory-bound.
    One with 1 MB and 1e6 FLOPs reaches neither roof (0.3 µs of 100): latency-bound, whatever its name says."""
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    b.step(0, 0, 1000)
    for i, name in enumerate([ADD, BN, FP32_XMMA]):
        b.launch(name, (i * 200, i * 200 + 5), (i * 200 + 10, i * 200 + 110))
    trace = read_kineto(b.write(tmp_path / "r.json"))
    n = len(trace.events)
    flops, nbytes = np.full(n, np.nan), np.full(n, np.nan)
    kernels = np.flatnonzero(trace.is_gpu_activity)
    flops[kernels] = [1e12, 1e9, 1e6]
    nbytes[kernels] = [1e6, 300e6, 1e6]
    work = gpu_work(trace, 0, H100, flops=flops, nbytes=nbytes)
    assert work.bound.tolist() == [Bound.COMPUTE, Bound.MEMORY, Bound.LATENCY]
    assert work.by_roofline.all()
    # Without them, the names decide.
    assert gpu_work(trace, 0, H100).bound.tolist() == [Bound.MEMORY, Bound.LATENCY, Bound.COMPUTE]
