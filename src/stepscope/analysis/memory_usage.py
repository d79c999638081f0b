"""Memory at the peak, by what holds it: parameters, gradients, optimizer state, activations, temporaries.

Each allocation in the trace is paired with its free (same device and block address). At the peak of
allocated memory, the live blocks are sorted by when they were made in the step that holds the peak:
  - made in the forward (before the first autograd node) and freed in the backward or later: activations;
  - made in the backward and kept past it (freed by zero_grad, or never): gradients;
  - made and freed within one phase (forward, backward, optimizer step): temporaries;
  - made before the step, or before the trace began (the allocator's total counts them, no event shows
    them): persistent, split with the run's census into parameters, gradients kept across steps and
    optimizer state; what the census does not explain is shown as unexplained.
Without a census (a trace from elsewhere) persistent memory is one category, said as such.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.flops import BACKWARD_RANGE_PREFIX, host_step
from stepscope.analysis.steps import Steps
from stepscope.trace.census import DeviceCensus, RunCensus
from stepscope.trace.model import NONE, Kind, Trace, distinct

TIMELINE_POINTS = 1000


@dataclass(frozen=True)
class Category:
    """One part of the peak memory: its name and bytes."""

    name: str  # parameters | gradients | optimizer state | activations | temporaries | persistent | unexplained
    bytes: int
    note: str = ""


@dataclass(frozen=True, eq=False)
class Lifetimes:
    """One device's allocations, in time order: where each was made and when (if ever) it was freed."""

    positions: np.ndarray  # indices into trace.memory of the allocations
    size: np.ndarray
    free_pos: np.ndarray  # index into trace.memory of the matching free, len(memory) when never freed


@dataclass(frozen=True)
class DevicePeak:
    """One device's memory peak: when it came, in which step, and what it held."""

    device: int
    peak_allocated: int
    peak_reserved: int | None
    peak_time_ns: int
    peak_step: int  # index into the steps, -1 outside them
    phase: str  # forward | backward | optimizer | outside the steps
    categories: tuple[Category, ...]  # they add up to peak_allocated
    outside_count: tuple[Category, ...]  # census items the allocator's count does not include (CPU)
    activation_rows: np.ndarray  # memory rows of the activation blocks live at the peak
    timeline: tuple[np.ndarray, np.ndarray, np.ndarray]  # time ns, allocated, reserved (-1 unknown)
    counts_from_profiler_start: bool  # the CPU allocator counts only what was made while profiling


def lifetimes(trace: Trace, device: int) -> Lifetimes:
    mem = trace.memory
    rows = np.flatnonzero(mem.device == device)
    # By address, then time: rows rise, so a stable sort by address alone (lexsort's working arrays are larger).
    order = rows[np.argsort(mem.addr[rows], kind="stable")]
    del rows
    size = mem.bytes[order]
    addr = mem.addr[order]  # once: a column's worth of the device's rows each time
    paired = np.zeros(len(order), dtype=bool)  # the block's next record, at its address, frees it
    np.equal(addr[1:], addr[:-1], out=paired[:-1])
    paired &= addr >= 0
    del addr
    paired[:-1] &= size[1:] < 0
    alloc = size > 0
    paired &= alloc
    nxt = np.concatenate([order[1:], [len(mem)]])
    free_pos = np.where(paired, nxt, len(mem))[alloc]
    positions = order[alloc]
    keep = np.argsort(positions, kind="stable")
    return Lifetimes(positions[keep], size[alloc][keep], free_pos[keep])


def _phases(trace: Trace, steps: Steps, step: int) -> tuple[int, int, int, int]:
    """(step start, backward start, backward end, step end) in host time; no backward: both at the end."""
    start, end = int(steps.cpu_start[step]), int(steps.cpu_end[step])
    ev = trace.events
    ranges = np.flatnonzero((ev.kind == Kind.CPU_OP) & trace.names_where(lambda s: s.startswith(BACKWARD_RANGE_PREFIX)))
    inside = ranges[(ev.start[ranges] >= start) & (ev.start[ranges] < end)]
    if len(inside) == 0:
        return start, end, end, end
    return start, int(ev.start[inside].min()), int(ev.end[inside].max()), end


def _phase_of(time: np.ndarray, bounds: tuple[int, int, int, int]) -> np.ndarray:
    """0 before the step, 1 forward, 2 backward, 3 optimizer step and the rest."""
    start, bwd_start, bwd_end, _ = bounds
    return np.select([time < start, time < bwd_start, time <= bwd_end], [0, 1, 2], 3)


def _timeline(trace: Trace, device: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mem = trace.memory
    rows = np.flatnonzero((mem.device == device) & (mem.total_allocated >= 0))
    if len(rows) > TIMELINE_POINTS:  # keep each bin's highest point: a peak is never smoothed away
        starts = np.linspace(0, len(rows), TIMELINE_POINTS, endpoint=False).astype(np.int64)
        values = mem.total_allocated[rows]
        highest = np.maximum.reduceat(values, starts)
        counts = np.diff(np.append(starts, len(rows)))
        hits = np.flatnonzero(values == np.repeat(highest, counts))
        rows = rows[hits[np.searchsorted(hits, starts)]]  # the first highest sample of each bin
    return mem.time[rows], mem.total_allocated[rows], mem.total_reserved[rows]


def device_peak(trace: Trace, steps: Steps, device: int, census: RunCensus | None) -> DevicePeak | None:
    mem = trace.memory
    rows = np.flatnonzero((mem.device == device) & (mem.total_allocated >= 0))
    if len(rows) == 0:
        return None
    peak_row = int(rows[np.argmax(mem.total_allocated[rows])])
    peak = int(mem.total_allocated[peak_row])
    t = int(mem.time[peak_row])
    reserved = mem.total_reserved[mem.device == device]
    step = int(host_step(np.array([t]), steps)[0]) if len(steps) else NONE
    life = lifetimes(trace, device)
    live = (life.positions <= peak_row) & (life.free_pos > peak_row)
    if step >= 0:
        bounds = _phases(trace, steps, step)
        made, freed = _phase_of(mem.time[life.positions], bounds), _freed_phase(mem.time, life.free_pos, bounds)
        phase = ("before the step", "forward", "backward", "optimizer")[int(_phase_of(np.array([t]), bounds)[0])]
    else:
        made = freed = np.zeros(len(life.positions), dtype=np.int64)
        phase = "outside the steps"
    activations = live & (made == 1) & (freed >= 2)
    gradients = live & (made == 2) & (freed >= 3)
    temporaries = live & (made >= 1) & ~activations & ~gradients
    persistent = peak - int(life.size[live & (made >= 1)].sum())
    # Gradients made afresh in this step (zero_grad(set_to_none=True)) are not also kept from the last one.
    made_fresh = int(life.size[(made == 2) & (freed >= 3)].sum())
    categories, outside = _split_persistent(max(persistent, 0), made_fresh,
                                            census.device(device) if census else None)
    categories = [Category("activations", int(life.size[activations].sum()),
                           "made in the forward, kept for the backward"),
                  Category("gradients", int(life.size[gradients].sum()) + _take(categories, "gradients"),
                           "made in the backward and kept past it"),
                  Category("temporaries", int(life.size[temporaries].sum()), "made and freed within one phase"),
                  *[c for c in categories if c.name != "gradients"]]
    return DevicePeak(
        device=device, peak_allocated=peak,
        peak_reserved=int(reserved.max()) if (reserved > 0).any() else None,
        peak_time_ns=t, peak_step=step, phase=phase,
        categories=tuple(c for c in categories if c.bytes > 0 or c.name in ("activations", "temporaries")),
        outside_count=tuple(outside), activation_rows=life.positions[activations],
        timeline=_timeline(trace, device), counts_from_profiler_start=device < 0,
    )


def _freed_phase(times: np.ndarray, free_pos: np.ndarray, bounds: tuple[int, int, int, int]) -> np.ndarray:
    """The phase each block was freed in; 4 when freed after the step or never."""
    freed_at = np.where(free_pos < len(times), times[np.minimum(free_pos, len(times) - 1)], np.iinfo(np.int64).max)
    return np.where(freed_at >= bounds[3], 4, _phase_of(freed_at, bounds))


def _take(categories: list[Category], name: str) -> int:
    return sum(c.bytes for c in categories if c.name == name)


def _split_persistent(persistent: int, fresh_gradients: int,
                      census: DeviceCensus | None) -> tuple[list[Category], list[Category]]:
    """Memory held from before the step, split by what the census counted on the device."""
    if census is None:
        note = "made before the step (parameters, optimizer state ...); stepscope run splits it"
        return [Category("persistent", persistent, note)], []
    left = persistent
    found, outside = [], []
    kept_gradients = max(census.gradients_bytes - fresh_gradients, 0)
    for name, size, note in (("parameters", census.parameters_bytes, "the model's parameters"),
                             ("gradients", kept_gradients, "kept across steps"),
                             ("optimizer state", census.optimizer_state_bytes, "the optimizer's state tensors")):
        counted = min(size, left)
        left -= counted
        if counted:
            found.append(Category(name, counted, note))
        if size > counted:
            outside.append(Category(name, size - counted, "not in the allocator's count at the peak"))
    found.append(Category("unexplained", left, "held from before the step; no parameter, gradient or optimizer state"))
    return found, outside


def device_peaks(trace: Trace, steps: Steps, census: RunCensus | None) -> tuple[DevicePeak, ...]:
    """The peak of every GPU the allocator reports on; host memory only on a trace without GPU memory."""
    devices = distinct(trace.memory.device[trace.memory.total_allocated >= 0])
    gpus = [int(d) for d in devices if d >= 0]
    chosen = gpus or [int(d) for d in devices if d < 0]
    return tuple(p for p in (device_peak(trace, steps, d, census) for d in chosen) if p is not None)
