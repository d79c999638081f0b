"""Kernel names short enough to read: template arguments and parameter lists elided, a mangled name read for its
nested name; names that are not C++ signatures (and anything a trace may hold) stay as they are."""

from __future__ import annotations

import pytest

from stepscope.report.names import short_kernel


@pytest.mark.parametrize(("name", "short"), [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
     "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<"
     "float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)",
     "at::native::vectorized_elementwise_kernel<…>(…)"),
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float, 32u>(long, long, "
     "float const*)", "at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<…>(…)"),
    ("_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolutionEEEvNT_6ParamsE",
     "cutlass__5x_cudnn::Kernel<…>(…)"),
    ("sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32",
     "sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32"),
    ("<script>alert(1)</script>", "<script>alert(1)</script>"),  # not C++: shown as the trace wrote it
    ("void broken<int(long)", "void broken<int(long)"),  # unbalanced: left whole
])
def test_short_names(name: str, short: str) -> None:
    assert short_kernel(name) == short


def test_template_instances_share_their_short_name() -> None:
    a = "void at::native::elementwise_kernel<128, 2, Lambda1>(int, Lambda1)"
    b = "void at::native::elementwise_kernel<128, 4, Lambda7>(int, Lambda7)"
    assert short_kernel(a) == short_kernel(b) != a
