"""FLOPs and bytes per op over the steps, joined to the kernels each op launched.

An op is counted once, at the outermost op that has a formula (aten::linear, not also the aten::addmm inside
it); ops run by autograd (inside `autograd::engine::evaluate_function`) are the backward. A forward op run
again inside the backward with grad enabled (it carries an autograd sequence number there, which the ops a
backward node runs do not) is activation recomputation: it counts toward hardware FLOPs, not model FLOPs.
Kernels are joined to ops through their launching runtime call, as the lines analysis does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.hostops import host_threads, inside_any, outermost
from stepscope.analysis.launches import launching_call
from stepscope.analysis.nesting import innermost, parents
from stepscope.analysis.op_costs import OpCost
from stepscope.analysis.op_formulas import FORMULAS, op_cost
from stepscope.analysis.steps import Steps
from stepscope.trace.model import NONE, Kind, Trace, start_order

BACKWARD_RANGE_PREFIX = "autograd::engine::evaluate_function:"
KINDS = ("matmul", "conv", "attention", "elementwise", "reduction", "norm", "copy")
TF32_KERNEL_MARKS = ("tf32", "s1688", "s16816", "xmma_gemm_f32f32_tf32")


@dataclass(frozen=True, eq=False)
class FlopCount:
    """The counted ops (rows of the events table) with their cost, and each kernel's op."""

    rows: np.ndarray  # counted op rows inside the steps, sorted
    flops: np.ndarray  # float64
    bytes: np.ndarray  # float64
    model: np.ndarray  # bool: matmul, conv, attention
    dtype: tuple[str, ...]  # the math's dtype per row ('fp32', 'tf32', 'bf16' ...)
    kind: tuple[str, ...]
    backward: np.ndarray  # bool
    recompute: np.ndarray  # bool: a forward op run again in the backward
    step: np.ndarray  # step index of each row
    dur: np.ndarray  # float64: each row's own duration (ns), as the trace counted holds it: a live capture's
    # timeline is another trace (its timing pass), whose rows these are not
    step_count: int  # the steps the rows were counted in
    kernel_rows: np.ndarray  # every kernel inside the steps
    kernel_op: np.ndarray  # index into `rows` of the counted op around each kernel's launch, -1 when none
    kernel_launcher: np.ndarray  # row of the innermost CPU op around each kernel's launch, -1 when unknown
    shapes_recorded: bool  # the trace carries op input shapes (record_shapes)
    from_trace_flops: int  # ops priced from the trace's own "flops" argument (no shapes, a formula name)
    # Every priced op, nested ones too (aten::addmm inside aten::linear, the autocast cast inside it): a kernel
    # is charged to the innermost priced op around its launch, so a cast kernel is not given a matmul's FLOPs.
    priced_rows: np.ndarray
    priced_flops: np.ndarray
    priced_bytes: np.ndarray
    priced_dtype: tuple[str, ...]
    priced_kind: tuple[str, ...]
    kernel_priced: np.ndarray  # index into priced_* per kernel, -1 when none

    def __len__(self) -> int:
        return len(self.rows)


def step_index(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The step each time falls in (windows sorted, back to back or apart), else -1."""
    step = np.searchsorted(starts, times, side="right") - 1
    inside = step >= 0
    inside[inside] &= times[inside] < ends[step[inside]]
    return np.where(inside, step, NONE)


def host_step(times: np.ndarray, steps: Steps) -> np.ndarray:
    """Host events belong to the step range the host recorded (the host runs ahead of the GPU)."""
    return step_index(times, steps.cpu_start, steps.cpu_end)


def _costs(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, list[OpCost | None], int]:
    """Each candidate's cost: from its recorded shapes, else from a 'flops' argument the trace gives. Priced
    once per distinct (name, inputs): a step repeats the same few signatures."""
    ev = trace.events
    width = len(trace.op_inputs) + 1
    keys = ev.name[rows].astype(np.int64) * width + (ev.inputs[rows].astype(np.int64) + 1)
    unique, inverse = np.unique(keys, return_inverse=True)
    priced = [op_cost(trace.strings[k // width], trace.op_inputs[k % width - 1] if k % width else None)
              for k in unique.tolist()]
    costs: list[OpCost | None] = [priced[k] for k in inverse.reshape(-1).tolist()]
    from_trace = 0
    given = ev.flops[rows]
    for j in np.flatnonzero((given > 0) & np.array([c is None for c in costs], dtype=bool)).tolist():
        costs[j], from_trace = OpCost(float(given[j]), float("nan"), "other", "matmul"), from_trace + 1
    known = np.array([c is not None for c in costs], dtype=bool)
    return known, costs, from_trace


def _enclosing(trace: Trace, counted: np.ndarray, q_rows: np.ndarray) -> np.ndarray:
    """For host rows, the counted op around each on its thread (index into `counted`), else -1. Counted ops
    are outermost, so they do not overlap on a thread and one search finds the one around."""
    ev = trace.events
    found = np.full(len(q_rows), NONE, dtype=np.int64)
    if len(counted) == 0 or len(q_rows) == 0:
        return found
    threads = host_threads(trace)
    starts = threads.shift(counted, ev.start[counted])
    order = np.argsort(starts, kind="stable")
    ends = threads.shift(counted, ev.end[counted])[order]
    q_start, q_end = threads.shift(q_rows, ev.start[q_rows]), threads.shift(q_rows, ev.end[q_rows])
    k = np.searchsorted(starts[order], q_start, side="right") - 1
    hit = (k >= 0) & (ends[np.maximum(k, 0)] >= q_end)
    found[hit] = order[k[hit]]
    return found


def _innermost_of(trace: Trace, rows: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """For host rows `calls`, the innermost of `rows` (which may nest) around each on its thread, else -1."""
    found = np.full(len(calls), NONE, dtype=np.int64)
    if len(rows) == 0 or len(calls) == 0:
        return found
    ev = trace.events
    threads = host_threads(trace)
    s, e = threads.shift(rows, ev.start[rows]), threads.shift(rows, ev.end[rows])
    order = start_order(s, e - s)
    hit = innermost(s[order], e[order], parents(s[order], e[order]), threads.shift(calls, ev.start[calls]),
                    threads.shift(calls, ev.end[calls]))
    found[hit >= 0] = order[hit[hit >= 0]]
    return found


def _kernel_ops(trace: Trace, counted: np.ndarray, priced: np.ndarray,
                kernels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each kernel: the counted op around its launch, the innermost priced op (indices into `counted` and
    `priced`) and the innermost CPU op (a row)."""
    launcher = launching_call(trace)[kernels]
    found = [np.full(len(kernels), NONE, dtype=np.int64) for _ in range(3)]
    linked = np.flatnonzero(launcher >= 0)
    if len(linked) == 0:
        return found[0], found[1], found[2]
    calls = launcher[linked]
    found[0][linked] = _enclosing(trace, counted, calls)
    found[1][linked] = _innermost_of(trace, priced, calls)
    # The innermost CPU op is only needed to name what launched the uncovered kernels.
    uncovered = found[1][linked] < 0
    ops = np.flatnonzero(trace.events.kind == Kind.CPU_OP)
    if len(ops) and uncovered.any() and len(priced):  # nothing priced (no shapes): nothing to say per op
        ops = ops[np.isin(ops, _around(trace, ops, calls[uncovered]))]
        # Launches made outside every op (a raw cudaLaunchKernel, a Triton launch from Python) have none around.
        if len(ops):
            inner = _innermost_of(trace, ops, calls[uncovered])
            found[2][linked[uncovered]] = np.where(inner >= 0, ops[np.maximum(inner, 0)], NONE)
    return found[0], found[1], found[2]


def _around(trace: Trace, ops: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """The ops that hold at least one of the calls: the few the innermost search needs on a big trace."""
    ev = trace.events
    threads = host_threads(trace)
    points = np.sort(threads.shift(calls, ev.start[calls]))
    lo = np.searchsorted(points, threads.shift(ops, ev.start[ops]), side="left")
    hi = np.searchsorted(points, threads.shift(ops, ev.end[ops]), side="right")
    return ops[hi > lo]


def _inner_dtypes(trace: Trace, rows: np.ndarray, costs: list[OpCost], nested: np.ndarray,
                  nested_costs: list[OpCost]) -> list[str]:
    """An op's math runs in the dtype of the ops it calls: under autocast aten::linear is recorded with
    float32 inputs and calls an aten::linear on bfloat16 ones. The innermost priced op of the same kind wins."""
    dtypes = [c.dtype for c in costs]
    owner = _enclosing(trace, rows, nested)
    for i, cost in zip(owner.tolist(), nested_costs, strict=True):  # nested rows in start order: deepest last
        if i >= 0 and cost.kind == costs[i].kind and cost.dtype != "other":
            dtypes[i] = cost.dtype
    return dtypes


def _tf32(trace: Trace, dtype: list[str], op_index: np.ndarray, kernels: np.ndarray) -> list[str]:
    """fp32 ops whose kernels run TF32 (judged by kernel name) are TF32 math."""
    marks = np.fromiter((any(m in s.lower() for m in TF32_KERNEL_MARKS) for s in trace.strings), bool,
                        len(trace.strings))
    tf32_ops = set(op_index[(op_index >= 0) & marks[trace.events.name[kernels]]].tolist())
    return ["tf32" if d == "fp32" and i in tf32_ops else d for i, d in enumerate(dtype)]


def count_flops(trace: Trace, steps: Steps) -> FlopCount:
    """Price every op with a formula inside the steps and join the steps' kernels to them."""
    ev = trace.events
    names = np.fromiter((s in FORMULAS for s in trace.strings), bool, len(trace.strings))
    candidates = np.flatnonzero((ev.kind == Kind.CPU_OP) & (names[ev.name] if len(names) else False))
    candidates = candidates[host_step(ev.start[candidates], steps) >= 0] if len(steps) else candidates[:0]
    known, costs, from_trace = _costs(trace, candidates)
    priced = candidates[known]
    costs = [c for c in costs if c is not None]
    all_costs = costs
    keep = np.isin(priced, outermost(trace, priced))
    rows = priced[keep]
    nested_costs = [c for c, k in zip(costs, keep.tolist(), strict=True) if not k]
    costs = [c for c, k in zip(costs, keep.tolist(), strict=True) if k]
    dtypes = _inner_dtypes(trace, rows, costs, priced[~keep], nested_costs)
    bwd_ranges = np.flatnonzero((ev.kind == Kind.CPU_OP) & trace.names_where(
        lambda s: s.startswith(BACKWARD_RANGE_PREFIX)))
    backward = inside_any(trace, bwd_ranges, rows)
    kernels = np.flatnonzero(ev.kind == Kind.KERNEL)
    kernels = kernels[step_index(ev.start[kernels], steps.start, steps.end) >= 0] if len(steps) else kernels[:0]
    op_index, priced_index, inner = _kernel_ops(trace, rows, priced, kernels)
    return FlopCount(
        rows=rows,
        flops=np.array([c.flops for c in costs], dtype=np.float64),
        bytes=np.array([c.bytes for c in costs], dtype=np.float64),
        model=np.array([c.model for c in costs], dtype=bool),
        dtype=tuple(_tf32(trace, dtypes, op_index, kernels)),
        kind=tuple(c.kind for c in costs),
        backward=backward,
        recompute=backward & (ev.sequence[rows] >= 0),
        step=host_step(ev.start[rows], steps),
        dur=ev.dur[rows].astype(np.float64),
        step_count=len(steps),
        kernel_rows=kernels,
        kernel_op=op_index,
        kernel_launcher=inner,
        shapes_recorded=bool((ev.inputs >= 0).any()),
        from_trace_flops=from_trace,
        priced_rows=priced,
        priced_flops=np.array([c.flops for c in all_costs], dtype=np.float64),
        priced_bytes=np.array([c.bytes for c in all_costs], dtype=np.float64),
        priced_dtype=tuple(_tf32(trace, [c.dtype for c in all_costs], priced_index, kernels)),
        priced_kind=tuple(c.kind for c in all_costs),
        kernel_priced=priced_index,
    )
