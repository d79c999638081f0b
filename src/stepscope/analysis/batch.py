"""The batch size a trace shows: the first dimension shared by the step's first host-to-device copy and the input
of its first convolution or linear layer, from the recorded input shapes, when every step that shows both agrees."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from stepscope.analysis.hostops import host_threads
from stepscope.analysis.launches import launching_call
from stepscope.analysis.steps import Steps
from stepscope.trace.model import CopyKind, Kind, Trace

COPY_OP = "aten::copy_"  # the op under .to(device) / .cuda() that launches the copy; its first input is the target
FIRST_LAYERS = frozenset({"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::linear"})


@dataclass(frozen=True)
class InferredBatch:
    """The batch size the recorded shapes show, and how it was found."""

    size: int | None  # samples per step; None when the trace does not show it unambiguously
    evidence: str  # how it was found, or why it was not


def inferred_batch(trace: Trace, steps: Steps) -> InferredBatch:
    """The batch size the recorded shapes show, or None with the reason."""
    if not trace.op_inputs:
        return InferredBatch(None, "the trace has no recorded input shapes (record_shapes)")
    copies = _batch_copies(trace, steps)
    layers = _first_layers(trace, steps)
    if not copies:
        return InferredBatch(None, "no host-to-device copy with recorded shapes in the steps")
    if not layers:
        return InferredBatch(None, "no convolution or linear layer with recorded shapes in the steps")
    both = sorted(set(copies) & set(layers))
    if not both:
        return InferredBatch(None, "no step shows both a copy and a layer with recorded shapes")
    for k in both:
        (copied, repeats), (layer, taken) = copies[k], layers[k]
        if copied != taken:
            return InferredBatch(None, f"in step {steps.ids[k]} the first host-to-device copy's first dimension "
                                       f"({copied}) and the first {layer}'s ({taken}) differ")
        if repeats > 1:
            return InferredBatch(None, f"step {steps.ids[k]} copies {repeats} inputs of its first copy's shape "
                                       "(several micro-batches per step?)")
    sizes = sorted({copies[k][0] for k in both})
    if len(sizes) > 1:
        return InferredBatch(None, f"the steps show different batch sizes ({', '.join(map(str, sizes))})")
    name = Counter(layers[k][0] for k in both).most_common(1)[0][0]
    return InferredBatch(sizes[0], f"the first host-to-device copy and the first {name}'s input share a first "
                                   f"dimension of {sizes[0]} in {len(both)} of {len(steps)} steps")


def _first_dim(trace: Trace, row: int, min_rank: int) -> int | None:
    inputs = trace.inputs_of(row)
    shape = inputs.dims[0] if inputs is not None and inputs.dims else ()
    if not isinstance(shape, tuple) or len(shape) < min_rank or not all(isinstance(d, int) for d in shape):
        return None
    return shape[0] if shape[0] > 0 else None


def _first_with_dim(trace: Trace, rows: np.ndarray, min_rank: int) -> tuple[int, int] | None:
    """The first of the rows whose first input has at least min_rank dimensions, and its first dimension."""
    for row in rows.tolist():
        size = _first_dim(trace, row, min_rank)
        if size is not None:
            return row, size
    return None


def _batch_copies(trace: Trace, steps: Steps) -> dict[int, tuple[int, int]]:
    """Per step: the first dimension of its first host-to-device copy of a tensor (not a scalar), and how many of
    the step's copies have that copy's recorded inputs."""
    ev = trace.events
    link = launching_call(trace)
    calls = link[(ev.kind == Kind.MEMCPY) & (ev.copy_kind == CopyKind.HTOD)]
    calls = calls[calls >= 0]
    ops = np.flatnonzero((ev.kind == Kind.CPU_OP) & (ev.inputs >= 0) & trace.names_where(lambda s: s == COPY_OP))
    if len(calls) == 0 or len(ops) == 0:
        return {}
    # The copy op around each launching call, on the call's own thread (copy ops do not nest in one another).
    threads = host_threads(trace)
    starts = threads.shift(ops, ev.start[ops])
    order = np.argsort(starts, kind="stable")
    ops, starts = ops[order], starts[order]
    at = np.searchsorted(starts, threads.shift(calls, ev.start[calls]), side="right") - 1
    hit = at >= 0
    hit[hit] &= threads.shift(ops[at[hit]], ev.end[ops[at[hit]]]) >= threads.shift(calls[hit], ev.end[calls[hit]])
    issuers = np.unique(ops[at[hit]])  # table order: by start
    found: dict[int, tuple[int, int]] = {}
    step_of = steps.index_of(ev.start[issuers], host=True)
    for k in np.unique(step_of[step_of >= 0]).tolist():
        mine = issuers[step_of == k]
        first = _first_with_dim(trace, mine, 1)
        if first is not None:
            found[k] = (first[1], int((ev.inputs[mine] == ev.inputs[first[0]]).sum()))
    return found


def _first_layers(trace: Trace, steps: Steps) -> dict[int, tuple[str, int]]:
    """Per step: its first convolution or linear layer with a batched input, and that input's first dimension."""
    ev = trace.events
    rows = np.flatnonzero((ev.kind == Kind.CPU_OP) & (ev.inputs >= 0) & trace.names_where(FIRST_LAYERS.__contains__))
    step_of = steps.index_of(ev.start[rows], host=True)
    rows, step_of = rows[step_of >= 0], step_of[step_of >= 0]  # by start, so each step's rows are together
    found: dict[int, tuple[str, int]] = {}
    if len(rows) == 0:
        return found
    ks, firsts = np.unique(step_of, return_index=True)
    for k, lo, hi in zip(ks.tolist(), firsts.tolist(), np.append(firsts[1:], len(rows)).tolist(), strict=True):
        # Almost always the step's first row (the model's first layer); 1-D or unrecorded inputs are passed over.
        first = _first_with_dim(trace, rows[lo:hi], 2)
        if first is not None:
            found[k] = (trace.name_of(first[0]), first[1])
    return found
