"""Which kernels run on tensor cores, judged by name: the one list, kept here and tested."""

from __future__ import annotations

import re

# Names that mark tensor-core (matrix-unit) kernels across cuBLAS/cuDNN/CUTLASS/Triton/ROCm generations.
TENSOR_CORE_PATTERNS: tuple[str, ...] = (
    r"hmma",  # Volta/Turing/Ampere half-precision MMA (cuBLAS, cuDNN)
    r"[hsi]\d{3,4}gemm",  # volta_h884gemm, turing_s1688gemm, ...
    r"[hsib]\d{4,5}(?:gemm|cudnn|_?conv|_?fprop|_?dgrad|_?wgrad)",  # ampere h16816gemm, s16816cudnn
    r"s16816|h16816|s1688|h1688|i8816|bf16_s16816",
    r"gmma",  # Hopper warpgroup MMA (gmma / wgmma)
    r"xmma",  # cuDNN/cuBLASLt xmma kernels
    r"cutlass",  # CUTLASS GEMMs and convolutions
    r"nvjet",  # cuBLAS 12.x Hopper/Blackwell kernels
    r"flash_fwd|flash_bwd|fmha|flash_attn|flashattn",
    r"sm(?:80|86|89|90|100|120)_xmma|sm90_|sm100_",
    r"triton_(?:tem|.*_(?:mm|bmm|addmm|dot)(?:_|$))",  # Triton templates and matmul kernels use tl.dot
    r"mfma|wmma",  # AMD matrix cores, CUDA WMMA
    r"Cijk_.*_MI\d",  # ROCm Tensile GEMMs built on matrix instructions
)
_TENSOR_CORE = re.compile("|".join(TENSOR_CORE_PATTERNS), re.IGNORECASE)
# Plain FP32 SIMT GEMMs look like GEMMs but never touch tensor cores; so do the xmma kernels built on FFMA
# (`sm80_xmma_gemm_f32f32_..._ffma`: fused FP32 multiply-adds on the CUDA cores, what cuBLAS runs for fp32
# matmuls with TF32 off, seen on an H100).
_NOT_TENSOR_CORE = re.compile(r"sgemm|dgemm|gemv|gemmk1|_ffma\b|_ffma_", re.IGNORECASE)


def is_tensor_core_kernel(name: str) -> bool:
    return _TENSOR_CORE.search(name) is not None and _NOT_TENSOR_CORE.search(name) is None
