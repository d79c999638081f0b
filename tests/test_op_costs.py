"""The per-op formulas on hand-built inputs, each against a count done by hand."""

from __future__ import annotations

import pytest

from stepscope.analysis.headroom import batch_headroom
from stepscope.analysis.memory_usage import Category, DevicePeak
from stepscope.analysis.op_formulas import op_cost
from stepscope.trace.model import OpInputs


def op(name: str, dims: tuple, types: tuple, concrete: tuple = ()):
    return op_cost(name, OpInputs(dims=dims, types=types, concrete=concrete))


def test_matmul_broadcasts_batches_and_vectors() -> None:
    # (2, 1, 8, 16) @ (3, 16, 4): batch (2, 3), 2 x 6 x 8 x 16 x 4 FLOPs
    cost = op("aten::matmul", ((2, 1, 8, 16), (3, 16, 4)), ("float", "float"))
    assert cost.flops == 2 * 6 * 8 * 16 * 4 and cost.kind == "matmul" and cost.dtype == "fp32"
    assert cost.bytes == (2 * 8 * 16 + 3 * 16 * 4 + 6 * 8 * 4) * 4
    assert op("aten::matmul", ((16,), (16, 4)), ("c10::BFloat16", "c10::BFloat16")).flops == 2 * 16 * 4
    assert op("aten::mm", ((8, 16), (15, 4)), ("float", "float")) is None  # shapes that do not multiply


def test_linear_addmm_bmm() -> None:
    assert op("aten::linear", ((4, 7, 32), (64, 32), (64,)), ("c10::Half",) * 3).flops == 2 * 28 * 32 * 64
    assert op("aten::addmm", ((64,), (28, 32), (32, 64), (), ()), ("float",) * 3 + ("Scalar",) * 2).flops == (
        2 * 28 * 32 * 64)
    assert op("aten::bmm", ((5, 8, 16), (5, 16, 2)), ("float", "float")).flops == 2 * 5 * 8 * 16 * 2


@pytest.mark.parametrize(("concrete", "out"), [
    (("", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "1"), 30 * 30),  # stride 1, no padding
    (("", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"), 16 * 16),  # stride 2, padding 1
    (("", "", "", "[1, 1]", "[2, 2]", "[2, 2]", "1"), 32 * 32),  # dilation 2 with padding 2
    (("", "", "", "[1]", "same", "[1]", "1"), 32 * 32),  # padding='same'
    (("", "", "", "[1]", "valid", "[1]", "1"), 30 * 30),
])
def test_conv2d_output_size(concrete: tuple, out: int) -> None:
    cost = op("aten::conv2d", ((2, 4, 32, 32), (8, 4, 3, 3), (8,), (), (), (), ()),
              ("float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"), concrete)
    assert cost.flops == 2 * 2 * out * 8 * (4 * 3 * 3)


def test_transposed_and_backward_convolution() -> None:
    # convolution(input, weight, bias, stride, padding, dilation, transposed=True, output_padding, groups)
    cost = op("aten::convolution", ((2, 8, 10, 10), (8, 4, 3, 3), (), (), (), (), (), (), ()),
              ("float",) * 2 + ("",) + ("ScalarList",) * 3 + ("Scalar", "ScalarList", "Scalar"),
              ("", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[1, 1]", "1"))
    assert cost.flops == 2 * 2 * 100 * (8 * 4 * 9)  # from the input's side
    # convolution_backward(grad_out, input, weight, bias_sizes, stride, padding, dilation, transposed,
    # output_padding, groups, output_mask): only the weight's gradient asked for
    back = op("aten::convolution_backward", ((2, 8, 16, 16), (2, 4, 32, 32), (8, 4, 3, 3)) + ((),) * 8,
              ("float",) * 3 + ("ScalarList",) * 4 + ("Scalar", "ScalarList", "Scalar", "ScalarList"),
              ("", "", "", "[8]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, True]"))
    assert back.flops == 2 * 2 * 256 * (8 * 4 * 9)


def test_attention_forward_and_backward() -> None:
    q = (2, 4, 128, 32)
    fwd = op("aten::scaled_dot_product_attention", (q, (2, 4, 256, 32), (2, 4, 256, 32)),
             ("c10::BFloat16",) * 3)
    assert fwd.flops == 2 * 8 * 128 * 256 * (32 + 32) and fwd.dtype == "bf16" and fwd.kind == "attention"
    bwd = op("aten::_scaled_dot_product_flash_attention_backward", ((2, 4, 128, 32), q, (2, 4, 256, 32),
                                                                    (2, 4, 256, 32)), ("c10::BFloat16",) * 4)
    assert bwd.flops == 2 * fwd.flops


def test_memory_bound_ops() -> None:
    add = op("aten::add", ((64, 32), (32,), ()), ("c10::Half", "c10::Half", "Scalar"))
    assert add.bytes == (64 * 32 + 32 + 64 * 32) * 2 and add.kind == "elementwise" and not add.model
    assert op("aten::fill_", ((100,), ()), ("float", "Scalar")).bytes == 400  # written, not read
    assert op("aten::copy_", ((100,), (100,), ()), ("c10::BFloat16", "float", "Scalar")).bytes == 200 + 400
    assert op("aten::_to_copy", ((100,), (), ()), ("float", "Scalar", ""), ("", "15", "")).bytes == 400 + 200
    nll = op("aten::nll_loss_forward", ((512, 8192), (512,), (), (), ()), ("float", "long int", "", "Scalar",
                                                                            "Scalar"))
    assert nll.bytes == 512 * 8 + 512 * 4  # one log-probability per row, not the whole (N, C) input
    assert op("aten::_foreach_add_", ((), ()), ("TensorList", "Scalar")) is None  # no dtype: uncovered


def peak(categories: dict[str, int], reserved: int | None) -> DevicePeak:
    import numpy as np

    total = sum(categories.values())
    return DevicePeak(device=0, peak_allocated=total, peak_reserved=reserved, peak_time_ns=0, peak_step=0,
                      phase="backward", categories=tuple(Category(k, v) for k, v in categories.items()),
                      outside_count=(), activation_rows=np.zeros(0, np.int64),
                      timeline=(np.zeros(0), np.zeros(0), np.zeros(0)), counts_from_profiler_start=False)


def test_batch_headroom_by_hand() -> None:
    # fixed 10 GB; 2 GB per sample at batch 8 (16 GB activations); reserved 10% over allocated; 80 GB device,
    # 1 GB outside PyTorch: usable (80 - 1) x 0.95 / 1.1 = 68.227 GB; (68.227 - 10) / 2 = 29.1 -> 29.
    g = 10**9
    room = batch_headroom(peak({"parameters": 4 * g, "optimizer state": 6 * g, "activations": 16 * g},
                               reserved=int(26 * g * 1.1)), 8, 80 * g, 1 * g)
    assert room.max_batch == 29 and room.fixed_bytes == 10 * g and room.per_sample_bytes == 2 * g
    assert batch_headroom(peak({"activations": g}, None), None, 80 * g, None) is None  # no batch size known
