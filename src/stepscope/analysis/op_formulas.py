"""Which ops have a formula, and the one function that prices an op: `op_cost(name, inputs)`."""

from __future__ import annotations

from collections.abc import Callable

from stepscope.analysis.op_costs import (
    OpCost,
    attention_cost,
    conv_backward_cost,
    conv_cost,
    copy_into_cost,
    elementwise_cost,
    embedding_backward_cost,
    embedding_cost,
    fill_cost,
    linear_cost,
    matmul_cost,
    nll_loss_cost,
    tensor_bytes,
    to_copy_cost,
)
from stepscope.trace.model import OpInputs

Formula = Callable[[OpInputs], "OpCost | None"]

_UNARY = ("abs", "neg", "exp", "exp2", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh",
          "sigmoid", "relu", "relu6", "gelu", "silu", "mish", "elu", "leaky_relu", "hardtanh", "hardswish",
          "hardsigmoid", "softplus", "erf", "sign", "floor", "ceil", "round", "trunc", "clamp", "clamp_min",
          "clamp_max", "pow", "square", "logical_not", "bitwise_not", "nan_to_num",
          "threshold", "native_dropout", "dropout", "clone", "contiguous_copy")
_BINARY = ("add", "sub", "rsub", "mul", "div", "remainder", "fmod", "maximum", "minimum", "max_other", "min_other",
           "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "bitwise_and", "bitwise_or",
           "where", "masked_fill", "lerp", "addcmul", "addcdiv", "threshold_backward", "gelu_backward",
           "silu_backward", "sigmoid_backward", "tanh_backward", "hardswish_backward", "native_dropout_backward",
           "leaky_relu_backward", "elu_backward", "mse_loss", "mse_loss_backward")
_REDUCTIONS = ("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "norm",
               "linalg_vector_norm", "var", "std", "var_mean", "std_mean", "all", "any", "cumsum")
_NORMS = ("softmax", "_softmax", "log_softmax", "_log_softmax", "_softmax_backward_data",
          "_log_softmax_backward_data", "layer_norm", "native_layer_norm", "native_layer_norm_backward",
          "batch_norm", "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
          "native_batch_norm_backward", "cudnn_batch_norm", "cudnn_batch_norm_backward", "miopen_batch_norm",
          "group_norm", "native_group_norm", "native_group_norm_backward", "rms_norm", "_fused_rms_norm",
          "instance_norm")
# Foreach and fused optimizer ops (aten::_foreach_add_, aten::_fused_adamw_) have no formula: the profiler
# records their tensor lists without a dtype (and often without sizes), so their bytes are unknown.

FORMULAS: dict[str, Formula] = {
    "aten::mm": lambda i: matmul_cost(i, 0, 1),
    "aten::bmm": lambda i: matmul_cost(i, 0, 1),
    "aten::matmul": lambda i: matmul_cost(i, 0, 1),
    "aten::addmm": lambda i: matmul_cost(i, 1, 2, extra_read=tensor_bytes(i, 0)),
    "aten::baddbmm": lambda i: matmul_cost(i, 1, 2, extra_read=tensor_bytes(i, 0)),
    "aten::addbmm": lambda i: matmul_cost(i, 1, 2, extra_read=tensor_bytes(i, 0)),
    "aten::_addmm_activation": lambda i: matmul_cost(i, 1, 2, extra_read=tensor_bytes(i, 0)),
    "aten::linear": linear_cost,
    "aten::convolution_backward": conv_backward_cost,
    "aten::scaled_dot_product_attention": attention_cost(0, backward=False),
    "aten::_to_copy": to_copy_cost,
    "aten::embedding": embedding_cost,
    "aten::embedding_dense_backward": embedding_backward_cost,
    "aten::nll_loss_forward": nll_loss_cost(backward=False),
    "aten::nll_loss_backward": nll_loss_cost(backward=True),
}
for _name in ("aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution",
              "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"):
    FORMULAS[_name] = conv_cost(_name)
for _name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
              "_scaled_dot_product_fused_attention_overrideable"):
    FORMULAS[f"aten::{_name}"] = attention_cost(0, backward=False)
    FORMULAS[f"aten::{_name}_backward"] = attention_cost(1, backward=True)
FORMULAS["aten::_efficient_attention_backward"] = attention_cost(1, backward=True)
for _op in _UNARY + _BINARY:
    FORMULAS[f"aten::{_op}"] = FORMULAS[f"aten::{_op}_"] = elementwise_cost()
for _name in ("aten::copy_",):
    FORMULAS[_name] = copy_into_cost
for _name in ("aten::fill_", "aten::zero_"):
    FORMULAS[_name] = fill_cost
for _op in _REDUCTIONS:
    FORMULAS[f"aten::{_op}"] = elementwise_cost("reduction", writes_output=False)
for _op in _NORMS:
    FORMULAS[f"aten::{_op}"] = elementwise_cost("norm")


def has_formula(name: str) -> bool:
    return name in FORMULAS


def op_cost(name: str, inputs: OpInputs | None) -> OpCost | None:
    """FLOPs and bytes of one op, or None when it has no formula or its recorded inputs do not fit one."""
    formula = FORMULAS.get(name)
    if formula is None or inputs is None:
        return None
    try:
        return formula(inputs)
    except (IndexError, TypeError, ValueError, ZeroDivisionError):
        return None  # an input list other than the formula expects: uncovered, not a guess
