"""The figures advice rules need beyond the core analyses: what the optimizer, gradient zeroing, matmuls,
elementwise kernels, the DataLoader, copies and collectives cost per step. Means per step unless named."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from stepscope.analysis.categories import DATALOADER, category_masks
from stepscope.analysis.hostops import inside_any, outer_cpu_ops, outermost
from stepscope.analysis.kernels import SHORT_KERNEL_NS
from stepscope.analysis.launches import launching_call
from stepscope.analysis.precision import MATMUL_OP, is_matmul_kernel, precision
from stepscope.analysis.steps import Steps
from stepscope.analysis.syncs import is_sync_api
from stepscope.trace import intervals as iv
from stepscope.trace.model import CopyKind, HostMemory, Kind, Trace, distinct

OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
ZERO_GRAD = re.compile(r"^Optimizer\.zero_grad#")
# Multi-tensor (foreach) and fused optimizer implementations: one kernel for many parameters.
FUSED_OPTIMIZER = re.compile(r"multi_tensor_apply|fused_adam|fused_sgd|FusedAdam|_fused_|^aten::_foreach_",
                             re.IGNORECASE)
ELEMENTWISE_KERNEL = re.compile(r"elementwise_kernel|reduce_kernel|triton_poi|triton_per|triton_red|"
                                r"FillFunctor|CatArrayBatchedCopy|index_elementwise", re.IGNORECASE)
COMPILED = re.compile(r"^Torch-Compiled Region|^CompiledFunction|^TorchDynamo|^triton_")
# Square image sizes a float32 NCHW batch is commonly made of (3 channels, 4 bytes each), most common first:
# a byte count can fit several (32x224x224 is 8x448x448), and the common one is the likelier.
IMAGE_SIDES = (224, 256, 32, 299, 384, 512, 128, 64, 96, 112, 160, 192, 288, 320, 448)


@dataclass(frozen=True)
class LaunchGroup:
    """GPU work launched from inside some host ranges, per step."""

    launches: float
    gpu_ns: float
    host_ns: float  # time in the ranges themselves
    fused: bool = False  # for the optimizer: a foreach or fused implementation is in use


@dataclass(frozen=True)
class MatmulTime:
    """Kernel ns per step of GEMMs and convolutions by precision, and of all compute kernels."""

    fp32: float  # no tensor cores
    tf32: float  # fp32 data on tensor (matrix) cores
    half: float  # fp16 / bf16 / int8 / fp8
    kernel: float

    @property
    def total(self) -> float:
        return self.fp32 + self.tf32 + self.half


@dataclass(frozen=True)
class Elementwise:
    """Short elementwise kernels per step, what torch.compile would fuse."""

    short_count: float  # short elementwise kernels per step
    short_ns: float
    kernel_count: float  # all kernels per step
    compiled: bool  # torch.compile / Triton is already in use


@dataclass(frozen=True)
class DataLoaderUse:
    """How the steps take their batches from the DataLoader, and the host time it costs."""

    iterator: str | None  # "single-process" (num_workers=0), "multi-process", or None without a DataLoader
    host_ns: float  # time inside DataLoader __next__ per step
    calls_ns: np.ndarray  # each __next__ call inside the steps


@dataclass(frozen=True)
class HostToDevice:
    """The steps' host-to-device copies: the largest, and the bandwidth pinned and pageable copies reach."""

    largest_copy_bytes: int  # the largest single HtoD copy (median over steps)
    largest_copy_ns: int
    image_shape: tuple[int, int, int, int] | None  # a float32 NCHW image batch that size would be
    pinned_gb_s: float | None  # bandwidth achieved by pinned HtoD copies in this trace
    pageable_gb_s: float | None


@dataclass(frozen=True)
class Collectives:
    """Collective kernels per step and their time."""

    count: float  # collective kernels per step
    ns: float  # their kernel time per step


def _per_step_mean(steps: Steps, times: np.ndarray, weights: np.ndarray | None = None, host: bool = False) -> float:
    return float(steps.per_step(times, weights, host).mean()) if len(steps) else 0.0


def launched_inside(trace: Trace, ranges: np.ndarray) -> np.ndarray:
    """GPU activity rows whose launching call lies inside one of the host ranges (same thread)."""
    link = launching_call(trace)
    gpu = np.flatnonzero(link >= 0)
    return gpu[inside_any(trace, ranges, link[gpu])]


def _launch_group(trace: Trace, steps: Steps, ranges: np.ndarray, fused: bool = False) -> LaunchGroup:
    ev = trace.events
    rows = launched_inside(trace, ranges)
    launch_start = ev.start[launching_call(trace)[rows]]
    host = iv.union(ev.start[ranges], ev.end[ranges])
    host_ns = float(iv.coverage(host, steps.cpu_start, steps.cpu_end).sum()) / max(len(steps), 1)
    return LaunchGroup(launches=_per_step_mean(steps, launch_start, host=True),
                       gpu_ns=_per_step_mean(steps, launch_start, ev.dur[rows], host=True), host_ns=host_ns,
                       fused=fused)


def _named(trace: Trace, pattern: re.Pattern[str], *kinds: Kind) -> np.ndarray:
    return np.flatnonzero(trace.events.of_kind(*kinds) & trace.names_where(lambda s: pattern.match(s) is not None))


def zeroing(trace: Trace, steps: Steps) -> LaunchGroup:
    """Gradient zeroing: work launched by optimizer.zero_grad() or by top-level tensor.zero_() calls."""
    ranges = _named(trace, ZERO_GRAD, Kind.USER_ANNOTATION, Kind.CPU_OP)
    ops = outer_cpu_ops(trace)
    top_zero = ops[np.isin(trace.events.name[ops], [i for i, s in enumerate(trace.strings) if s == "aten::zero_"])]
    return _launch_group(trace, steps, np.union1d(ranges, top_zero))


def optimizer(trace: Trace, steps: Steps) -> LaunchGroup:
    """The optimizer step: its launches, kernel time and host time, and whether it is fused or foreach."""
    ranges = outermost(trace, _named(trace, OPTIMIZER_STEP, Kind.USER_ANNOTATION, Kind.CPU_OP))
    rows = launched_inside(trace, ranges)
    ops = np.flatnonzero((trace.events.kind == Kind.CPU_OP) & trace.names_where(FUSED_OPTIMIZER.search))
    fused = bool(len(rows)) and (bool(trace.names_where(FUSED_OPTIMIZER.search)[rows].any())
                                 or bool(inside_any(trace, ranges, ops).any()))
    return _launch_group(trace, steps, ranges, fused=fused)


def _compute_kernels(trace: Trace, steps: Steps) -> np.ndarray:
    ev = trace.events
    kernel = ev.kind == Kind.KERNEL
    rows = np.flatnonzero(kernel & ~category_masks(trace, steps.source)["communication"])
    return rows[steps.index_of(ev.start[rows]) >= 0]


def matmul_time(trace: Trace, steps: Steps) -> MatmulTime:
    """GEMM and convolution kernel time per step, split by the precision the kernels run in."""
    ev = trace.events
    rows = _compute_kernels(trace, steps)
    n = max(len(steps), 1)
    link = launching_call(trace)[rows]
    by_op = np.zeros(len(rows), dtype=bool)
    linked = link >= 0
    by_op[linked] = inside_any(trace, _named(trace, MATMUL_OP, Kind.CPU_OP), link[linked])
    names = ev.name[rows]
    totals = {"fp32": 0.0, "tf32": 0.0, "half": 0.0}
    for name_id, op in {(int(a), bool(b)) for a, b in zip(names, by_op, strict=True)}:
        name = trace.strings[name_id]
        if is_matmul_kernel(name, op):
            sel = (names == name_id) & (by_op == op)
            totals[precision(name)] += float(ev.dur[rows[sel]].sum())
    return MatmulTime(**{k: v / n for k, v in totals.items()}, kernel=float(ev.dur[rows].sum()) / n)


def elementwise(trace: Trace, steps: Steps) -> Elementwise:
    """Short elementwise kernels per step (what torch.compile fuses), and whether compile is in use."""
    ev = trace.events
    rows = _compute_kernels(trace, steps)
    short = rows[(ev.dur[rows] < SHORT_KERNEL_NS) & trace.names_where(ELEMENTWISE_KERNEL.search)[rows]]
    n = max(len(steps), 1)
    compiled = bool(trace.names_where(lambda s: COMPILED.match(s) is not None).any())
    return Elementwise(short_count=len(short) / n, short_ns=float(ev.dur[short].sum()) / n,
                       kernel_count=len(rows) / n, compiled=compiled)


def dataloader(trace: Trace, steps: Steps) -> DataLoaderUse:
    """How the DataLoader is iterated and how long each step waits in __next__."""
    ev = trace.events
    rows = _named(trace, DATALOADER, Kind.CPU_OP, Kind.USER_ANNOTATION)
    rows = rows[steps.index_of(ev.start[rows], host=True) >= 0]
    names = {trace.name_of(r) for r in rows}
    iterator = ("multi-process" if any("MultiProcessing" in s for s in names)
                else "single-process" if names else None)
    host = iv.union(ev.start[rows], ev.end[rows])
    host_ns = float(iv.coverage(host, steps.cpu_start, steps.cpu_end).sum()) / max(len(steps), 1)
    return DataLoaderUse(iterator=iterator, host_ns=host_ns, calls_ns=ev.dur[rows])


def host_to_device(trace: Trace, steps: Steps) -> HostToDevice:
    """The largest host-to-device copy per step, the image batch it could be, and achieved bandwidths."""
    ev = trace.events
    rows = np.flatnonzero((ev.kind == Kind.MEMCPY) & (ev.copy_kind == CopyKind.HTOD) & (ev.bytes > 0))
    step = steps.index_of(ev.start[rows])
    rows, step = rows[step >= 0], step[step >= 0]
    largest = np.zeros(max(len(steps), 1), dtype=np.int64)
    np.maximum.at(largest, step, ev.bytes[rows])
    biggest = int(np.median(largest)) if len(rows) else 0
    match = rows[ev.bytes[rows] == biggest]
    return HostToDevice(
        largest_copy_bytes=biggest, largest_copy_ns=int(np.median(ev.dur[match])) if len(match) else 0,
        image_shape=image_batch_shape(biggest),
        pinned_gb_s=_bandwidth(trace, rows[ev.host_memory[rows] == HostMemory.PINNED]),
        pageable_gb_s=_bandwidth(trace, rows[ev.host_memory[rows] == HostMemory.PAGEABLE]),
    )


def _bandwidth(trace: Trace, rows: np.ndarray) -> float | None:
    dur = trace.events.dur[rows].sum()
    return float(trace.events.bytes[rows].sum() / dur) if dur > 0 else None  # bytes/ns = GB/s


def image_batch_shape(nbytes: int) -> tuple[int, int, int, int] | None:
    """(N, 3, H, W), N >= 2, when nbytes is a float32 RGB batch of a common square size, else None."""
    for side in IMAGE_SIDES:
        per_image = 3 * side * side * 4
        if nbytes >= 2 * per_image and nbytes % per_image == 0:
            return (nbytes // per_image, 3, side, side)
    return None


def collectives(trace: Trace, steps: Steps) -> Collectives:
    ev = trace.events
    rows = np.flatnonzero((ev.kind == Kind.KERNEL) & category_masks(trace, steps.source)["communication"])
    return Collectives(count=_per_step_mean(steps, ev.start[rows]),
                       ns=_per_step_mean(steps, ev.start[rows], ev.dur[rows]))


def slowest_runtime_call(trace: Trace, steps: Steps) -> tuple[str, int]:
    """The longest runtime call inside the steps that neither synchronises nor copies (often a one-time cost)."""
    ev = trace.events
    blocking = trace.names_where(lambda s: is_sync_api(s) or "memcpy" in s.lower())
    rows = np.flatnonzero((ev.kind == Kind.RUNTIME) & ~blocking)
    rows = rows[steps.index_of(ev.start[rows], host=True) >= 0]
    if len(rows) == 0:
        return "", 0
    top = rows[np.argmax(ev.dur[rows])]
    return trace.name_of(top), int(ev.dur[top])


def launch_calls(trace: Trace, steps: Steps) -> float:
    """Runtime calls per step that enqueued GPU work."""
    link = launching_call(trace)
    callers = distinct(link[link >= 0])
    return _per_step_mean(steps, trace.events.start[callers], host=True)


@dataclass(frozen=True)
class Signals:
    """Every figure above, for one trace's steps."""

    zeroing: LaunchGroup
    optimizer: LaunchGroup
    matmul: MatmulTime
    elementwise: Elementwise
    dataloader: DataLoaderUse
    host_to_device: HostToDevice
    collectives: Collectives
    launches: float  # runtime calls per step that enqueued GPU work
    slowest_call: tuple[str, int]  # the longest runtime call that neither syncs nor copies, and its ns


def compute_signals(trace: Trace, steps: Steps) -> Signals:
    return Signals(
        zeroing=zeroing(trace, steps), optimizer=optimizer(trace, steps), matmul=matmul_time(trace, steps),
        elementwise=elementwise(trace, steps), dataloader=dataloader(trace, steps),
        host_to_device=host_to_device(trace, steps), collectives=collectives(trace, steps),
        launches=launch_calls(trace, steps), slowest_call=slowest_runtime_call(trace, steps),
    )
