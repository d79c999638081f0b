"""What a fix would do, by replay: the step's graph changed the way the fix changes the program, replayed, and its
median step compared with the graph replayed unchanged. Each says what it assumed.

The trace given is the timeline the report reads (for a live capture, already de-perturbed). The changes:
- more DataLoader workers: the single-process loading leaves the host's path; a batch still takes its measured
  time in a worker, so the step is at least a batch's time over the workers (free cores bound the workers when the
  loading computes; loading that waits on storage uses no core);
- pinned, non-blocking copies: pageable host-to-device copies run at the pinned bandwidth and no longer hold the host;
- a bigger batch: kernels and copies take k times as long, the host's per-step work does not, nor the optimizer's
  kernels (sized by the weights); the answer is per sample;
- uint8 inputs: image copies move a quarter of the bytes, and the loader's float conversion and normalisation leave
  the host's path for one cheap pass on the device;
- AMP: matmul and convolution kernels run at the lower-precision roof (factor given), others as they are; on top of
  the loading moved to workers where the host's loading would otherwise hide what the device gains;
- CUDA graphs: the host's op dispatch and launches inside the model's step leave its path (one graph launch), kernels
  stay, each queued behind the last;
- set_to_none: the gradient zeroing kernels and zero_grad's host time go.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from stepscope.analysis.launches import launching_call
from stepscope.analysis.precision import is_matmul_kernel, precision
from stepscope.analysis.steps import find_steps
from stepscope.replay.blocking import blocking_calls
from stepscope.replay.engine import replay
from stepscope.replay.host_clock import HostCost, step_threads
from stepscope.trace import intervals as iv
from stepscope.trace.model import CopyKind, HostMemory, Kind, Trace, distinct

SINGLE_PROCESS_BATCH = re.compile(r"^enumerate\(DataLoader\)#_SingleProcessDataLoaderIter\.__next__")
OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
ZERO_GRAD = re.compile(r"^Optimizer\.zero_grad#")
# What a batch costs the main process when workers made it (take it from the queue, rebuild the tensors).
WORKER_BATCH_OWN_NS = 100_000
# Ops of a loader's float conversion and normalisation (ToTensor, Normalize, `/ 255`, `- mean`, `/ std`).
FLOAT_CONVERSION_OP = re.compile(r"^aten::(?:to|_to_copy|copy_|div_?|sub_?|mul_?|true_divide_?|contiguous|clone)$")


@dataclass(frozen=True)
class WhatIf:
    """A fix's replayed step against the unchanged one, and what was assumed."""

    fix: str
    base_ns: float  # the replayed step as it is (median)
    step_ns: float  # the replayed step with the fix (median)
    samples_factor: float  # samples per step, relative (a bigger batch)
    assumptions: tuple[str, ...]

    @property
    def speedup(self) -> float:
        """samples/s with the fix over samples/s without."""
        return self.samples_factor * self.base_ns / self.step_ns if self.step_ns > 0 else 1.0


def median_step(trace: Trace, count: int | None = None) -> float:
    """The median step; with `count` (the steps before the change), the window over that many steps when the change
    merged some (host ranges cut whole collapse into one another: a step is then the window's share)."""
    steps = find_steps(trace)
    if not len(steps):
        return 0.0
    if count is None or len(steps) == count:
        return float(np.median(steps.duration))
    return float(steps.end.max() - steps.start.min()) / max(count, 1)


def _replayed_step(trace: Trace, count: int | None = None, **change: Any) -> float:
    """The median step of the trace replayed with `change` (stepscope.replay.engine.replay's arguments); the replay
    carries only what the steps are found from."""
    return median_step(replay(trace, for_steps=True, **change), count)


def _base_step(trace: Trace, host_cost: HostCost | None) -> float:
    """The step the change is measured against: the trace's, or with `host_cost` (a profiler's cost per event taken
    out of the host, in the same replay as the change) the trace replayed with that alone, once per trace and cost
    (the device-side what-ifs share it)."""
    if host_cost is None:
        return median_step(trace)
    return trace.derived(("whatif.base_step", host_cost), lambda: _replayed_step(trace, host_cost=host_cost))


def _on_path(trace: Trace) -> np.ndarray:
    ev = trace.events
    mask = np.zeros(len(ev), dtype=bool)
    for pid, tid in step_threads(trace):
        mask |= (ev.pid == pid) & (ev.tid == tid)
    return mask


def _cut_of(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ev = trace.events
    u = iv.union(ev.start[rows], ev.end[rows])
    return u.starts.astype(np.float64), u.ends.astype(np.float64)


def _names(trace: Trace, pattern: re.Pattern[str], kinds: tuple[Kind, ...]) -> np.ndarray:
    ev = trace.events
    return np.flatnonzero(ev.of_kind(*kinds) & trace.names_where(lambda s: pattern.match(s) is not None))


@dataclass(frozen=True)
class Workers:
    """Single-process loading moved to worker processes, as a change other what-ifs can build on: the host no longer
    spends `cut`, and a step is at least `floor_ns` (a batch's loading over the workers)."""

    cut: tuple[np.ndarray, np.ndarray]
    floor_ns: float
    steps: int  # the steps before the change (cut host ranges may merge some)
    said: str  # what was assumed of the workers


def workers_change(trace: Trace, workers: int, free_cores: int | None, waits_on_storage: bool) -> Workers | None:
    """The loading's change, or None where the trace has no single-process batches on the step's path."""
    rows = _names(trace, SINGLE_PROCESS_BATCH, (Kind.CPU_OP, Kind.USER_ANNOTATION))
    rows = rows[_on_path(trace)[rows]]
    if len(rows) == 0:
        return None
    batch_ns = float(np.median(trace.events.dur[rows]))
    used = workers if waits_on_storage or free_cores is None else max(min(workers, free_cores), 1)
    why = ("loading waits on storage: each worker waits, so the cores do not bound them" if waits_on_storage else
           f"{used} worker(s) on free cores" + ("" if free_cores is None else f" ({free_cores} free)"))
    return Workers(_cut_of(trace, rows), batch_ns / used, len(find_steps(trace)),
                   f"a batch takes {batch_ns / 1e6:.2f} ms to load, as measured in this process; {why}")


def _with_workers(trace: Trace, change: Workers, host_cost: HostCost | None, **more: Any) -> tuple[float, float]:
    """The step with the workers' change (and `more` of the replay's arguments): (step, the host's own work)."""
    host = _replayed_step(trace, host_cost=host_cost, cut=change.cut, count=change.steps, **more) + WORKER_BATCH_OWN_NS
    return max(host, change.floor_ns), host


def more_workers(trace: Trace, workers: int, free_cores: int | None, waits_on_storage: bool,
                 host_cost: HostCost | None = None) -> WhatIf | None:
    """Single-process loading moved to `workers` worker processes."""
    change = workers_change(trace, workers, free_cores, waits_on_storage)
    if change is None:
        return None
    step, host = _with_workers(trace, change, host_cost)
    return WhatIf("dataloader_workers", _base_step(trace, host_cost), step, 1.0, (
        change.said, f"the step is the longer of the host's own work ({host / 1e6:.2f} ms) and a batch per worker"))


def pinned_copies(trace: Trace, pinned_gb_s: float, host_cost: HostCost | None = None) -> WhatIf | None:
    """Pageable host-to-device copies made from pinned memory, without blocking the host."""
    ev = trace.events
    rows = np.flatnonzero(ev.of_kind(Kind.MEMCPY) & (ev.copy_kind == CopyKind.HTOD)
                          & (ev.host_memory == HostMemory.PAGEABLE) & (ev.bytes > 0))
    if len(rows) == 0:
        return None
    gpu = np.flatnonzero(trace.is_gpu_activity)
    dur = ev.dur[gpu].astype(np.float64)
    at = np.searchsorted(gpu, rows)
    dur[at] = np.minimum(dur[at], ev.bytes[rows] / pinned_gb_s)  # bytes / (GB/s) = ns
    calls = launching_call(trace)[rows]
    calls = calls[calls >= 0]
    blocking = np.intersect1d(calls, blocking_calls(trace))
    base, n = _base_step(trace, host_cost), len(find_steps(trace))
    step = _replayed_step(trace, host_cost=host_cost, rows=gpu, new_dur=dur, unblock=blocking,
                          cut=_cut_of(trace, blocking), count=n)
    return WhatIf("pin_memory", base, step, 1.0, (
        f"{len(rows)} pageable copies at {pinned_gb_s:.1f} GB/s, the host no longer waiting for them",))


def bigger_batch(trace: Trace, k: float, host_cost: HostCost | None = None) -> WhatIf:
    """k times the batch: device work grows k times except the optimizer's; the host's per-step work stays."""
    ev = trace.events
    gpu = np.flatnonzero(trace.is_gpu_activity)
    optimizer = _launched_inside(trace, gpu, _names(trace, OPTIMIZER_STEP, (Kind.USER_ANNOTATION, Kind.CPU_OP)))
    dur = ev.dur[gpu].astype(np.float64) * np.where(optimizer, 1.0, k)
    base = _base_step(trace, host_cost)
    step = _replayed_step(trace, host_cost=host_cost, rows=gpu, new_dur=dur)
    return WhatIf("larger_batch", base, step, k, (
        f"kernels and copies take {k:g}x as long (the optimizer's do not: they are sized by the weights); the "
        "host's work per step stays; memory allowing",))


def uint8_inputs(trace: Trace, host_cost: HostCost | None = None) -> WhatIf | None:
    """Images sent as uint8 (a quarter of the bytes), converted and normalised on the device."""
    ev = trace.events
    copies = np.flatnonzero(ev.of_kind(Kind.MEMCPY) & (ev.copy_kind == CopyKind.HTOD) & (ev.bytes >= 1 << 20))
    loading = _names(trace, SINGLE_PROCESS_BATCH, (Kind.CPU_OP, Kind.USER_ANNOTATION))
    conversions = _names(trace, FLOAT_CONVERSION_OP, (Kind.CPU_OP,))
    conversions = conversions[_within(trace, conversions, loading) & _on_path(trace)[conversions]]
    if len(copies) == 0 and len(conversions) == 0:
        return None
    gpu = np.flatnonzero(trace.is_gpu_activity)
    dur = ev.dur[gpu].astype(np.float64)
    dur[np.searchsorted(gpu, copies)] /= 4
    base, n = _base_step(trace, host_cost), len(find_steps(trace))
    step = _replayed_step(trace, host_cost=host_cost, rows=gpu, new_dur=dur, cut=_cut_of(trace, conversions),
                          count=n)
    return WhatIf("uint8_transfer", base, step, 1.0, (
        f"{len(copies)} large host-to-device copies move a quarter of the bytes",
        f"{len(conversions)} float conversion/normalisation ops of the loader leave the host "
        "(one fused pass on the device, taken as free)" if len(conversions) else
        "the workers' float conversion is not in this trace: its saving is not counted"))


def amp(trace: Trace, factor: dict[str, float], host_cost: HostCost | None = None,
        after: Workers | None = None) -> WhatIf | None:
    """Matmul and convolution kernels in fp32 (or TF32) run `factor[precision]` times faster; `after`: on top of the
    loading moved to workers (measured against the step with that change alone)."""
    ev = trace.events
    gpu = np.flatnonzero(trace.is_gpu_activity)  # all of them: an activity left out would keep its recorded time
    kernel = ev.kind[gpu] == Kind.KERNEL
    names, name_of_row = np.unique(ev.name[gpu], return_inverse=True)  # each name's regexes once
    per_name = np.array([factor.get(precision(n), 1.0) if is_matmul_kernel(n) else 1.0
                         for n in (trace.strings[int(i)] for i in names)])
    speed = np.where(kernel, per_name[name_of_row] if len(names) else 1.0, 1.0)
    if not (speed > 1).any():
        return None
    said = (f"{int((speed > 1).sum())} matmul/convolution kernels "
            f"{', '.join(f'{p} {f:g}x' for p, f in factor.items())} faster; other kernels unchanged")
    if after is not None:
        base, _ = _with_workers(trace, after, host_cost)
        step, host = _with_workers(trace, after, host_cost, rows=gpu, new_dur=ev.dur[gpu] / speed)
        return WhatIf("amp", base, step, 1.0, (
            f"after the batches load in workers ({after.said}): against the step with that change alone", said,
            f"the step is the longer of the host's own work ({host / 1e6:.2f} ms) and a batch per worker"))
    base = _base_step(trace, host_cost)
    step = _replayed_step(trace, host_cost=host_cost, rows=gpu, new_dur=ev.dur[gpu] / speed)
    return WhatIf("amp", base, step, 1.0, (said,))


def cuda_graphs(trace: Trace, host_cost: HostCost | None = None) -> WhatIf | None:
    """The step's kernels replayed from a graph: the host's dispatch and launches leave its path."""
    ev = trace.events
    link = launching_call(trace)
    launches = distinct(link[link >= 0])
    if len(launches) == 0:
        return None
    ops = np.flatnonzero(ev.of_kind(Kind.CPU_OP) & _on_path(trace))
    launching_ops = ops[_contains_any(trace, ops, launches)]
    keep_out = np.concatenate([_names(trace, SINGLE_PROCESS_BATCH, (Kind.CPU_OP,)), blocking_calls(trace)])
    cut_rows = np.setdiff1d(distinct(np.concatenate([launching_ops, launches])), distinct(keep_out), assume_unique=True)
    cut_rows = cut_rows[~_contains_any(trace, cut_rows, blocking_calls(trace))]  # a sync's wait stays
    base, n = _base_step(trace, host_cost), len(find_steps(trace))
    step = _replayed_step(trace, host_cost=host_cost, cut=_cut_of(trace, cut_rows), count=n)
    return WhatIf("cuda_graphs", base, step, 1.0, (
        "the ops that launch GPU work cost the host nothing (one graph launch per step); data loading, syncs and "
        "Python between the ops stay; kernels unchanged",))


def set_to_none(trace: Trace, host_cost: HostCost | None = None) -> WhatIf | None:
    """zero_grad(set_to_none=True): no zeroing kernels, no zero_grad host work."""
    zero = _names(trace, ZERO_GRAD, (Kind.USER_ANNOTATION, Kind.CPU_OP))
    if len(zero) == 0:
        return None
    gpu = np.flatnonzero(trace.is_gpu_activity)
    inside = _launched_inside(trace, gpu, zero)
    if not inside.any():
        return None
    dur = trace.events.dur[gpu].astype(np.float64)
    dur[inside] = 0.0
    base, n = _base_step(trace, host_cost), len(find_steps(trace))
    step = _replayed_step(trace, host_cost=host_cost, rows=gpu, new_dur=dur, cut=_cut_of(trace, zero), count=n)
    return WhatIf("set_to_none", base, step, 1.0, (f"{int(inside.sum())} zeroing kernels and zero_grad's host time "
                                                   "removed",))


def _within(trace: Trace, rows: np.ndarray, outer: np.ndarray) -> np.ndarray:
    """Which of `rows` lie inside one of the `outer` ranges."""
    ev = trace.events
    if len(outer) == 0 or len(rows) == 0:
        return np.zeros(len(rows), dtype=bool)
    u = iv.union(ev.start[outer], ev.end[outer])
    k = np.searchsorted(u.starts, ev.start[rows], side="right") - 1
    ok = k >= 0
    ok[ok] &= ev.end[rows][ok] <= u.ends[k[ok]]
    return ok


def _launched_inside(trace: Trace, gpu: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """For GPU rows, whether their launching call lies inside one of `ranges`."""
    link = launching_call(trace)[gpu]
    inside = np.zeros(len(gpu), dtype=bool)
    linked = link >= 0
    inside[linked] = _within(trace, link[linked], ranges)
    return inside


def _contains_any(trace: Trace, rows: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """Which of `rows` (host ranges) contain at least one of the `inner` events (same thread): on each thread, an
    inner event starting inside the range whose end is inside it too, i.e. the least end among those starting in
    [start, end] is <= end (a minimum over each row's slice of the thread's inner events, taken all at once)."""
    ev = trace.events
    out = np.zeros(len(rows), dtype=bool)
    if len(inner) == 0 or len(rows) == 0:
        return out
    row_tid, inner_tid = ev.tid[rows], ev.tid[inner]
    for tid in np.intersect1d(distinct(row_tid), distinct(inner_tid), assume_unique=True):
        mine = inner[inner_tid == tid]
        mine = mine[np.argsort(ev.start[mine], kind="stable")]
        starts = ev.start[mine]
        at = np.flatnonzero(row_tid == tid)
        row_end = ev.end[rows[at]]
        first = np.searchsorted(starts, ev.start[rows[at]], side="left")
        last = np.searchsorted(starts, row_end, side="right")
        some = last > first
        if not some.any():
            continue
        ends = np.append(ev.end[mine], np.iinfo(np.int64).max)  # a pad: reduceat's indices stay below its length
        bounds = np.empty(2 * int(some.sum()), dtype=np.intp)
        bounds[0::2], bounds[1::2] = first[some], last[some]
        least_end = np.minimum.reduceat(ends, bounds)[0::2]  # the even slices are [first, last)
        out[at[some]] = least_end <= row_end[some]
    return out
