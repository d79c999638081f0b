"""Which kernels are matrix multiplies or convolutions, and in which precision they run: judged by name."""

from __future__ import annotations

import re

from stepscope.analysis.tensor_cores import is_tensor_core_kernel

# GEMM and convolution kernels across cuBLAS, cuDNN, CUTLASS, Triton templates and ROCm Tensile/MIOpen.
_MATMUL_KERNEL = re.compile(
    r"gemm|scudnn|hcudnn|cudnn.*(?:fprop|dgrad|wgrad)|dgrad_engine|wgrad_alg|implicit_convolve|convolve_|"
    r"conv2d|conv3d|_conv_|xmma|cutlass|nvjet|flash_fwd|flash_bwd|fmha|Cijk_|igemm|MIOpenConv|naive_conv|"
    r"_sdpa_\w*(?:flash|fprop|bprop)|flash_[fb]prop|"
    r"triton_tem|triton_\w*_(?:mm|bmm|addmm)(?:_|$)",
    re.IGNORECASE,
)
# Kernels launched from inside a conv op that are not the convolution itself (layout changes, BN, ...).
_NOT_MATMUL = re.compile(r"elementwise|nchwToNhwc|nhwcToNchw|bn_fw|bn_bw|batch_norm|reduce_kernel|fill|"
                         r"copy|splitKreduce|gemv|epilogue|scal_kernel|transpose", re.IGNORECASE)
# Half-precision (or narrower) data: fp16, bf16, int8, fp8.
_HALF = re.compile(r"f16|fp16|bf16|half|bfloat|h\d{3,5}(?:gemm|cudnn|_?conv)|hmma|\bh?gemm_?f16|i8816|int8|"
                   r"e4m3|e5m2|fp8|_HB_|_BBS_|_HHS_", re.IGNORECASE)
# Single-precision data on tensor cores: TF32 (Ampere and later).
_TF32 = re.compile(r"tf32|(?:^|[^a-z])s1688|s16816|f32f32_tf32|^Cijk_\w*?_SB?_", re.IGNORECASE)

# Ops whose work can run on tensor cores: what autocast moves to fp16/bf16.
MATMUL_OP = re.compile(
    r"^aten::(?:conv\w*|cudnn_convolution\w*|miopen_convolution\w*|_convolution\w*|convolution\w*|mm|addmm|"
    r"_addmm_activation|bmm|baddbmm|addbmm|matmul|linear|einsum|\w*scaled_dot_product\w*|_flash_attention\w*)$"
    r"|^(?:Convolution|Mm|Addmm|Bmm|Baddbmm|Linear)Backward\d*$"
)


def is_matmul_kernel(name: str, launched_by_matmul_op: bool = False) -> bool:
    """A GEMM or convolution kernel: by its name, or launched by a matmul/conv op and not a helper kernel."""
    if _NOT_MATMUL.search(name) and not _MATMUL_KERNEL.search(name.split("<")[0]):
        return False
    return bool(_MATMUL_KERNEL.search(name)) or launched_by_matmul_op


def precision(name: str) -> str:
    """'half' (fp16/bf16/int8/fp8), 'tf32' (fp32 data on tensor or matrix cores) or 'fp32' (no tensor cores)."""
    if _HALF.search(name):
        return "half"
    if is_tensor_core_kernel(name):
        # Tensor-core kernels that name no dtype are taken as half precision, so AMP is never advised twice.
        return "tf32" if _TF32.search(name) else "half"
    return "fp32"
