"""What bounds each GPU activity on the origin GPU, and in which dtype it computes: the seam between the trace and
the cross-GPU scaling.

With FLOPs and bytes per kernel (the utilisation analyses compute them from recorded shapes), a kernel is
classed by the roofline on the origin: compute-bound, memory-bound, or latency-bound when it reaches neither
roof. Without them, by its name and its duration: GEMMs, convolutions and attention are compute-bound;
PyTorch's elementwise, reduction, copy and layout kernels stream memory; a kernel too short to reach either
roof, or one the rules do not know, is latency-bound (it scales with the SMs and their clock). Copies go by
their link, collectives by the GPU-to-GPU link.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from stepscope.analysis.categories import is_collective_kernel
from stepscope.analysis.precision import MATMUL_OP, is_matmul_kernel
from stepscope.analysis.tensor_cores import is_tensor_core_kernel
from stepscope.predict.gpus import Roofs
from stepscope.trace.model import CopyKind, Kind, Trace


class Bound(IntEnum):
    COMPUTE = 0
    MEMORY = 1
    LATENCY = 2
    HOST_COPY = 3  # host <-> device copies: the PCIe link
    PEER = 4  # collectives and peer copies: the GPU-to-GPU link


BOUND_NAMES = ("compute", "memory", "latency", "host copy", "collective")
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")  # the hardware table's keys; -1 = not a matmul
SHORT_NS = 4_000  # a kernel this short reaches neither roof: launch, ramp-up and tail dominate it
# Efficiency against the origin's roof under which a kernel with known FLOPs/bytes is latency-bound.
ROOF_EFFICIENCY_MIN = 0.2

# Kernels that stream memory: PyTorch's TensorIterator elementwise and reduction kernels, the fused optimizer
# kernels, copies and layout changes (cuDNN's NCHW<->NHWC), norms, softmax, losses, indexing, Triton's
# pointwise and reduction kernels.
_STREAMING = re.compile(
    r"elementwise_kernel|vectorized_|unrolled_elementwise|multi_tensor_apply|reduce_kernel|copy_kernel|"
    r"fill_kernel|CatArray|nchwToNhwc|nhwcToNchw|transpose|layer_norm|LayerNorm|GammaBeta|RowwiseMoments|"
    r"softmax|SoftMax|cross_entropy|nll_loss|embedding|dropout|index_|scatter|gather|"
    r"triton_(?:poi|red|per)_|Memset|Memcpy DtoD",
    re.IGNORECASE,
)
# Attention and warpgroup-MMA kernels the matmul name rules miss (cuDNN's fused SDPA: "..._sdpa_..._flash_bprop_
# wgmma_f16_...").
_ATTENTION = re.compile(r"sdpa|flash|fmha|attention|wgmma|gmma", re.IGNORECASE)
_DTYPE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fp8", re.compile(r"e4m3|e5m2|fp8", re.IGNORECASE)),
    ("bf16", re.compile(r"bf16|bfloat16", re.IGNORECASE)),
    ("tf32", re.compile(r"tf32|(?:^|[^a-z])s1688|s16816", re.IGNORECASE)),
    ("fp16", re.compile(r"f16|fp16|half|h884|h1688|h16816|hmma", re.IGNORECASE)),
    ("int8", re.compile(r"int8|imma|i8816|i8i8", re.IGNORECASE)),
    ("fp32", re.compile(r"ffma|sgemm|simt|scudnn|f32f32_f32f32|fp32|float", re.IGNORECASE)),
)


def matmul_dtype(name: str) -> str:
    """The dtype a GEMM/convolution kernel computes in, from its name: tensor-core kernels that name no dtype
    are taken as fp16 (bf16 has the same rate on every GPU that has both), others as fp32."""
    for dtype, rule in _DTYPE_RULES:
        if rule.search(name):
            return dtype
    return "fp16" if is_tensor_core_kernel(name) else "fp32"


@dataclass(frozen=True)
class GpuWork:
    """Per GPU activity of one device (rows sorted by start): what bounds it on the origin and its dtype."""

    rows: np.ndarray  # event rows
    bound: np.ndarray  # Bound, int8
    dtype: np.ndarray  # index into DTYPES for compute-bound work, else -1
    flops: np.ndarray  # float64, NaN when unknown
    bytes: np.ndarray  # float64, NaN when unknown (copies: the bytes moved)
    by_roofline: np.ndarray  # bool: classed from FLOPs and bytes, not from the name
    blocks: np.ndarray | None = None  # thread blocks in the grid (float, NaN when unknown), for wave quantisation
    blocks_per_sm: np.ndarray | None = None  # blocks resident on one SM at a time (its occupancy), NaN when unknown

    def __len__(self) -> int:
        return len(self.rows)


def _launching_op_names(trace: Trace, rows: np.ndarray) -> list[str | None]:
    """The host op each activity was launched from, through the external id kernels share with their op."""
    ev = trace.events
    ops = np.flatnonzero((ev.kind == Kind.CPU_OP) & (ev.external_id >= 0))
    if len(ops) == 0:
        return [None] * len(rows)
    order = np.argsort(ev.external_id[ops], kind="stable")
    ids, op_rows = ev.external_id[ops][order], ops[order]
    want = ev.external_id[rows]
    pos = np.minimum(np.searchsorted(ids, want), len(ids) - 1)
    hit = (ids[pos] == want) & (want >= 0)
    return [trace.strings[ev.name[op_rows[p]]] if h else None for p, h in zip(pos, hit, strict=True)]


def _by_name(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bound and dtype from kernel names (once per distinct name and launching op), copies by their kind."""
    ev = trace.events
    bound = np.full(len(rows), Bound.LATENCY, dtype=np.int8)
    dtype = np.full(len(rows), -1, dtype=np.int8)
    ops = _launching_op_names(trace, rows)
    memo: dict[tuple[int, bool], tuple[int, int]] = {}
    for i, row in enumerate(rows):
        kind = ev.kind[row]
        if kind == Kind.MEMCPY:
            copy = ev.copy_kind[row]
            bound[i] = Bound.HOST_COPY if copy in (CopyKind.HTOD, CopyKind.DTOH) else (
                Bound.PEER if copy == CopyKind.PTOP else Bound.MEMORY)
            continue
        if kind == Kind.MEMSET:
            bound[i] = Bound.MEMORY
            continue
        op = ops[i]
        key = (int(ev.name[row]), bool(op and MATMUL_OP.match(op)))
        if key not in memo:
            memo[key] = _classify_name(trace.strings[key[0]], key[1])
        bound[i], dtype[i] = memo[key]
    return bound, dtype


def _classify_name(name: str, launched_by_matmul: bool) -> tuple[int, int]:
    if is_collective_kernel(name):
        return Bound.PEER, -1
    matmul = is_matmul_kernel(name, launched_by_matmul) or _ATTENTION.search(name) is not None
    if matmul and not _STREAMING.search(name.split("<")[0]):
        return Bound.COMPUTE, DTYPES.index(matmul_dtype(name))
    if _STREAMING.search(name):
        return Bound.MEMORY, -1
    return Bound.LATENCY, -1


def _by_roofline(bound: np.ndarray, dtype: np.ndarray, flops: np.ndarray, nbytes: np.ndarray, dur: np.ndarray,
                 origin: Roofs) -> np.ndarray:
    """Reclass kernels with known FLOPs and bytes by the origin's roofs; returns which were reclassed."""
    known = np.isfinite(flops) & np.isfinite(nbytes) & (bound <= Bound.LATENCY)
    if not known.any() or origin.bandwidth is None:
        return np.zeros(len(bound), dtype=bool)
    for i in np.flatnonzero(known):
        peak, _ = origin.flops_for(DTYPES[dtype[i]] if dtype[i] >= 0 else "fp32")
        t_compute = flops[i] / peak if peak else 0.0
        t_memory = nbytes[i] / origin.bandwidth
        if max(t_compute, t_memory) * 1e9 < ROOF_EFFICIENCY_MIN * dur[i]:
            bound[i] = Bound.LATENCY
        else:
            bound[i] = Bound.COMPUTE if t_compute >= t_memory else Bound.MEMORY
            if bound[i] == Bound.COMPUTE and dtype[i] < 0:
                dtype[i] = DTYPES.index("fp32")
    return known


def gpu_work(trace: Trace, device: int, origin: Roofs, flops: np.ndarray | None = None,
             nbytes: np.ndarray | None = None, blocks: np.ndarray | None = None,
             blocks_per_sm: np.ndarray | None = None) -> GpuWork:
    """Class every GPU activity of `device`. `flops` and `nbytes` (per event row, NaN where unknown) override the
    trace's own columns: the utilisation analyses hand them over here when Facts carries them. `blocks` and
    `blocks_per_sm` (per event row, NaN where unknown: the grid's size and the blocks one SM holds at a time)
    switch on wave quantisation; the trace model does not carry a kernel's grid yet."""
    ev = trace.events
    rows = np.flatnonzero(trace.is_gpu_activity & (ev.device == device))
    bound, dtype = _by_name(trace, rows)
    f = (ev.flops if flops is None else flops)[rows].astype(np.float64)
    if nbytes is not None:
        b = nbytes[rows].astype(np.float64)
    else:
        b = np.where(ev.bytes[rows] >= 0, ev.bytes[rows], np.nan).astype(np.float64)
        b[ev.kind[rows] == Kind.KERNEL] = np.nan  # a kernel's bytes column is not its memory traffic
    reclassed = _by_roofline(bound, dtype, f, b, ev.dur[rows], origin)
    short = (ev.dur[rows] < SHORT_NS) & (bound <= Bound.MEMORY) & ~reclassed & (ev.kind[rows] == Kind.KERNEL)
    bound[short] = Bound.LATENCY
    return GpuWork(rows=rows, bound=bound, dtype=dtype, flops=f, bytes=b, by_roofline=reclassed,
                   blocks=None if blocks is None else blocks[rows].astype(np.float64),
                   blocks_per_sm=None if blocks_per_sm is None else blocks_per_sm[rows].astype(np.float64))
