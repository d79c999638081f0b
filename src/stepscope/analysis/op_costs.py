"""FLOPs and bytes of one op from its recorded inputs: the standard formulas, 2 FLOPs per multiply-add.

Matrix products, convolutions and attention are the model FLOPs (what MFU counts, as PaLM's definition and
PyTorch's FlopCounterMode do). Elementwise ops, reductions, norms and copies are counted in bytes, with a
nominal FLOP per output element so they can be placed on a roofline; they are left out of model FLOPs.
Bytes are the least traffic the op needs: its tensor inputs read once and its output written once.
An op without a formula here returns None: the caller reports its time as uncovered, never as zero FLOPs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from stepscope.trace.model import OpInputs

# Element sizes of the dtypes the profiler names in "Input type".
ELEMENT_BYTES = {
    "float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2, "long int": 8, "int": 4, "short int": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1,
}
# The hardware table's dtype keys.
MATH_DTYPE = {
    "float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16", "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8", "c10::Float8_e5m2fnuz": "fp8", "signed char": "int8",
    "double": "fp64",
}
# ScalarType codes in Concrete Inputs (e.g. the dtype argument of aten::_to_copy) -> element bytes.
SCALAR_TYPE_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 15: 2, 23: 1, 24: 1, 25: 1, 26: 1}

MODEL_KINDS = ("matmul", "conv", "attention")


@dataclass(frozen=True)
class OpCost:
    """The work of one op: FLOPs, bytes moved, the math's dtype and its kind."""

    flops: float
    bytes: float
    dtype: str  # the math's dtype as the hardware table names it ('fp32', 'bf16' ...), or 'other'
    kind: str  # matmul | conv | attention | elementwise | reduction | norm | copy

    @property
    def model(self) -> bool:
        """Counted in model FLOPs (and MFU)."""
        return self.kind in MODEL_KINDS


def numel(dims: tuple) -> int:
    return math.prod(dims) if dims and all(isinstance(d, int) for d in dims) else (1 if dims == () else 0)


def is_tensor(inputs: OpInputs, i: int) -> bool:
    return i < len(inputs.types) and inputs.types[i] in ELEMENT_BYTES and i < len(inputs.dims) and _shape(inputs, i)


def _shape(inputs: OpInputs, i: int) -> bool:
    dims = inputs.dims[i]
    return isinstance(dims, tuple) and all(isinstance(d, int) for d in dims)


def tensor_bytes(inputs: OpInputs, i: int) -> int:
    return numel(inputs.dims[i]) * ELEMENT_BYTES[inputs.types[i]] if is_tensor(inputs, i) else 0


def _esize(inputs: OpInputs, i: int) -> int:
    return ELEMENT_BYTES.get(inputs.types[i], 4) if i < len(inputs.types) else 4


def _dtype(inputs: OpInputs, i: int) -> str:
    return MATH_DTYPE.get(inputs.types[i], "other") if i < len(inputs.types) else "other"


def _ints(text: str) -> tuple[int, ...] | None:
    found = re.findall(r"-?\d+", text)
    return tuple(int(x) for x in found) if found else None


def _concrete(inputs: OpInputs, i: int) -> str:
    return inputs.concrete[i] if i < len(inputs.concrete) else ""


# -- matrix products --------------------------------------------------------------------------------------

def matmul_cost(inputs: OpInputs, a: int, b: int, extra_read: int = 0) -> OpCost | None:
    if not (is_tensor(inputs, a) and is_tensor(inputs, b)):
        return None
    x, y = inputs.dims[a], inputs.dims[b]
    if len(x) == 0 or len(y) == 0:
        return None
    x2 = (1, *x) if len(x) == 1 else x
    y2 = (*y, 1) if len(y) == 1 else y
    m, k, k2, n = x2[-2], x2[-1], y2[-2], y2[-1]
    if k != k2:
        return None
    batch = _broadcast(x2[:-2], y2[:-2])
    if batch is None:
        return None
    out = math.prod(batch) * m * n
    flops = 2.0 * math.prod(batch) * m * k * n
    moved = tensor_bytes(inputs, a) + tensor_bytes(inputs, b) + out * _esize(inputs, a) + extra_read
    return OpCost(flops, float(moved), _dtype(inputs, a), "matmul")


def _broadcast(x: tuple, y: tuple) -> tuple | None:
    out = []
    for i in range(1, max(len(x), len(y)) + 1):
        p = x[-i] if i <= len(x) else 1
        q = y[-i] if i <= len(y) else 1
        if p != q and 1 not in (p, q):
            return None
        out.append(max(p, q))
    return tuple(reversed(out))


def linear_cost(inputs: OpInputs) -> OpCost | None:
    if not (is_tensor(inputs, 0) and is_tensor(inputs, 1)):
        return None
    x, w = inputs.dims[0], inputs.dims[1]
    if len(w) != 2 or not x or x[-1] != w[1]:
        return None
    rows = numel(x[:-1]) if len(x) > 1 else 1
    flops = 2.0 * rows * w[1] * w[0]
    moved = tensor_bytes(inputs, 0) + tensor_bytes(inputs, 1) + tensor_bytes(inputs, 2) + rows * w[0] * _esize(
        inputs, 0)
    return OpCost(flops, float(moved), _dtype(inputs, 0), "matmul")


# -- convolutions -----------------------------------------------------------------------------------------

# name -> positions of (stride, padding, dilation, transposed or None, groups)
_CONV_ARGS = {
    "aten::conv1d": (3, 4, 5, None, 6), "aten::conv2d": (3, 4, 5, None, 6), "aten::conv3d": (3, 4, 5, None, 6),
    "aten::convolution": (3, 4, 5, 6, 8), "aten::_convolution": (3, 4, 5, 6, 8),
}
_CONV_TRANSPOSE = {"aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"}


def _conv_out(spatial: tuple, kernel: tuple, stride: tuple, padding: tuple | str, dilation: tuple) -> tuple | None:
    if padding == "same":
        return spatial
    pad = (0,) * len(spatial) if padding == "valid" else padding
    if not isinstance(pad, tuple):
        return None
    n = len(spatial)
    stride, pad, dilation = (_expand(v, n) for v in (stride, pad, dilation))
    if None in (stride, pad, dilation):
        return None
    return tuple((spatial[i] + 2 * pad[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(n))


def _expand(value: tuple | None, n: int) -> tuple | None:
    if value is None:
        return None
    return value * n if len(value) == 1 else (value if len(value) == n else None)


def _padding(text: str) -> tuple | str | None:
    text = text.strip().strip('"').lower()
    return text if text in ("same", "valid") else _ints(text)


def conv_cost(name: str) -> Callable[[OpInputs], OpCost | None]:
    def cost(inputs: OpInputs) -> OpCost | None:
        if not (is_tensor(inputs, 0) and is_tensor(inputs, 1)):
            return None
        x, w = inputs.dims[0], inputs.dims[1]
        if len(x) < 3 or len(w) != len(x):
            return None
        if name in _CONV_TRANSPOSE:
            transposed, stride, padding, dilation = True, _ints(_concrete(inputs, 3)), None, None
        else:
            s, p, d, t, _ = _CONV_ARGS[name]
            transposed = t is not None and _concrete(inputs, t).strip().lower() == "true"
            stride, padding, dilation = _ints(_concrete(inputs, s)), _padding(_concrete(inputs, p)), _ints(
                _concrete(inputs, d))
        if transposed:  # the work is the forward conv's, run from the input's side
            flops = 2.0 * x[0] * numel(x[2:]) * numel(w)
            out = None
        else:
            out = _conv_out(x[2:], w[2:], stride or (1,), padding if padding is not None else (0,),
                            dilation or (1,))
            if out is None or min(out) <= 0:
                return None
            flops = 2.0 * x[0] * numel(out) * numel(w)
        out_bytes = x[0] * w[0] * numel(out) * _esize(inputs, 0) if out is not None else tensor_bytes(inputs, 0)
        moved = tensor_bytes(inputs, 0) + tensor_bytes(inputs, 1) + tensor_bytes(inputs, 2) + out_bytes
        return OpCost(flops, float(moved), _dtype(inputs, 0), "conv")

    return cost


def conv_backward_cost(inputs: OpInputs) -> OpCost | None:
    """aten::convolution_backward(grad_out, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask): one conv's work per gradient asked for (input, weight)."""
    if not all(is_tensor(inputs, i) for i in (0, 1, 2)):
        return None
    grad, x, w = inputs.dims[0], inputs.dims[1], inputs.dims[2]
    transposed = _concrete(inputs, 7).strip().lower() == "true"
    per_grad = 2.0 * x[0] * numel((x if transposed else grad)[2:]) * numel(w)
    mask = [m.strip().lower() == "true" for m in _concrete(inputs, 10).strip("[] ").split(",") if m.strip()]
    wanted = mask[:2] if len(mask) >= 2 else [True, True]
    moved = sum(tensor_bytes(inputs, i) for i in (0, 1, 2))
    moved += (tensor_bytes(inputs, 1) if wanted[0] else 0) + (tensor_bytes(inputs, 2) if wanted[1] else 0)
    return OpCost(per_grad * sum(wanted), float(moved), _dtype(inputs, 0), "conv")


# -- attention --------------------------------------------------------------------------------------------

def attention_cost(q: int, backward: bool) -> Callable[[OpInputs], OpCost | None]:
    """Scaled dot-product attention over (..., L, E) queries and (..., S, E) keys: QK^T and PV, 2 FLOPs per
    multiply-add, causal or not (as FlopCounterMode counts); the backward is twice the forward."""

    def cost(inputs: OpInputs) -> OpCost | None:
        if not all(is_tensor(inputs, i) for i in (q, q + 1, q + 2)):
            return None
        qd, kd, vd = inputs.dims[q], inputs.dims[q + 1], inputs.dims[q + 2]
        if min(len(qd), len(kd), len(vd)) < 2:
            return None
        batch = numel(qd[:-2])
        length, keys, e, ev = qd[-2], kd[-2], qd[-1], vd[-1]
        flops = 2.0 * batch * length * keys * (e + ev)
        out = batch * length * ev * _esize(inputs, q)
        moved = sum(tensor_bytes(inputs, i) for i in (q, q + 1, q + 2)) + out
        if backward:  # reads grad_out, q, k, v, out; writes dq, dk, dv
            flops, moved = 2 * flops, moved + out + sum(tensor_bytes(inputs, i) for i in (q, q + 1, q + 2))
        return OpCost(flops, float(moved), _dtype(inputs, q), "attention")

    return cost


# -- memory-bound work ------------------------------------------------------------------------------------

def _tensors(inputs: OpInputs) -> list[int]:
    return [i for i in range(len(inputs.types)) if is_tensor(inputs, i)]


def elementwise_cost(kind: str = "elementwise", writes_output: bool = True) -> Callable[[OpInputs], OpCost | None]:
    def cost(inputs: OpInputs) -> OpCost | None:
        tensors = _tensors(inputs)
        if not tensors:
            return None
        out_shape = inputs.dims[tensors[0]]
        for i in tensors[1:]:
            out_shape = _broadcast(out_shape, inputs.dims[i]) or out_shape
        elements = numel(out_shape)
        read = sum(tensor_bytes(inputs, i) for i in tensors)
        written = elements * _esize(inputs, tensors[0]) if writes_output else 0
        return OpCost(float(elements), float(read + written), _dtype(inputs, tensors[0]), kind)

    return cost


def to_copy_cost(inputs: OpInputs) -> OpCost | None:
    if not is_tensor(inputs, 0):
        return None
    code = _ints(_concrete(inputs, 1))
    out_size = SCALAR_TYPE_BYTES.get(code[0], _esize(inputs, 0)) if code else _esize(inputs, 0)
    n = numel(inputs.dims[0])
    return OpCost(0.0, float(tensor_bytes(inputs, 0) + n * out_size), _dtype(inputs, 0), "copy")


def embedding_cost(inputs: OpInputs) -> OpCost | None:
    if not (is_tensor(inputs, 0) and is_tensor(inputs, 1)) or len(inputs.dims[0]) != 2:
        return None
    rows = numel(inputs.dims[1]) * inputs.dims[0][1] * _esize(inputs, 0)
    return OpCost(0.0, float(tensor_bytes(inputs, 1) + 2 * rows), _dtype(inputs, 0), "copy")


def copy_into_cost(inputs: OpInputs) -> OpCost | None:
    """copy_(dst, src): the source read, the destination written."""
    if not (is_tensor(inputs, 0) and is_tensor(inputs, 1)):
        return None
    return OpCost(0.0, float(tensor_bytes(inputs, 0) + tensor_bytes(inputs, 1)), _dtype(inputs, 0), "copy")


def fill_cost(inputs: OpInputs) -> OpCost | None:
    """fill_ / zero_: the tensor written, nothing read."""
    if not is_tensor(inputs, 0):
        return None
    return OpCost(0.0, float(tensor_bytes(inputs, 0)), _dtype(inputs, 0), "copy")


def embedding_backward_cost(inputs: OpInputs) -> OpCost | None:
    """embedding_dense_backward(grad, indices, num_weights, ...): grad and indices read, the weight's
    gradient written."""
    if not (is_tensor(inputs, 0) and is_tensor(inputs, 1)) or not inputs.dims[0]:
        return None
    rows = _ints(_concrete(inputs, 2))
    written = rows[0] * inputs.dims[0][-1] * _esize(inputs, 0) if rows else tensor_bytes(inputs, 0)
    return OpCost(0.0, float(tensor_bytes(inputs, 0) + tensor_bytes(inputs, 1) + written), _dtype(inputs, 0), "copy")


def nll_loss_cost(backward: bool) -> Callable[[OpInputs], OpCost | None]:
    """nll_loss reads one log-probability per row (the target's), not the whole (N, C) input; its backward
    writes one gradient per row (the zeroing of the rest is a zero_ op of its own). Inputs: forward (self,
    target, ...), backward (grad_out, self, target, ...)."""

    def cost(inputs: OpInputs) -> OpCost | None:
        x, target = (1, 2) if backward else (0, 1)
        if not (is_tensor(inputs, x) and is_tensor(inputs, target)):
            return None
        rows = numel(inputs.dims[target])
        moved = tensor_bytes(inputs, target) + rows * _esize(inputs, x)
        return OpCost(float(rows), float(moved), _dtype(inputs, x), "reduction")

    return cost
