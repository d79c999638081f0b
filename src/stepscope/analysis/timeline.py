"""One representative step as a compact timeline: host threads and GPU streams, idle gaps by cause, syncs.

Times are µs from the step's start, rounded to the ns, so the result serialises as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stepscope.analysis.annotations import sync_points
from stepscope.analysis.categories import category_masks
from stepscope.analysis.gpu import GpuUsage
from stepscope.analysis.nesting import thread_numbers
from stepscope.analysis.steps import Steps
from stepscope.analysis.syncs import SyncSummary
from stepscope.trace import intervals as iv
from stepscope.trace.model import Kind, Trace, distinct
from stepscope.units import report_us as _us

MAX_SPANS = 4000  # the longest spans are kept; shorter ones are sub-pixel at the step's scale anyway
HOST_DEPTH = 3  # op nesting levels drawn per host thread
IDLE_CAUSES = (("host_wait", "host wait"), ("kernel_wait", "kernel wait"), ("other", "other idle"))
# Span categories, in the order the drawing stacks them; idle ones are named idle_<cause>.
CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec",
              *(f"idle_{c}" for c, _ in IDLE_CAUSES))
_CAT = {name: i for i, name in enumerate(CATEGORIES)}


@dataclass(frozen=True)
class TimelineRow:
    """One row of the median step's timeline."""

    label: str
    kind: str  # "host" (ops at one nesting level), "runtime", "gpu" (one stream), "idle" (one device)


@dataclass(frozen=True)
class TimelineSpans:
    """Columns of spans: row index, start and duration in µs, category and name as indexes."""

    row: tuple[int, ...]
    start_us: tuple[float, ...]
    dur_us: tuple[float, ...]
    category: tuple[int, ...]
    name: tuple[int, ...]


@dataclass(frozen=True)
class TimelineSync:
    """A synchronisation drawn on the median step's timeline."""

    row: int
    start_us: float
    dur_us: float
    api: str
    op: str
    location: dict[str, Any] | None


@dataclass(frozen=True)
class StepTimeline:
    """The median step's timeline: its rows, their spans and syncs, drawn in the HTML report."""

    step_id: str
    start_us: float  # the step's start, µs from the trace's start
    duration_us: float
    rows: tuple[TimelineRow, ...]
    categories: tuple[str, ...]
    names: tuple[str, ...]
    spans: TimelineSpans
    syncs: tuple[TimelineSync, ...]
    left_out: int  # spans left out to stay compact (the shortest ones)


def representative_step(durations: np.ndarray) -> int:
    """The step of median duration (the lower middle one for an even count)."""
    return int(np.argsort(durations, kind="stable")[(len(durations) - 1) // 2])


def step_timeline(trace: Trace, steps: Steps, gpu: GpuUsage, syncs: SyncSummary,
                  max_spans: int = MAX_SPANS) -> StepTimeline | None:
    """The timeline of the median step, or None without steps."""
    if len(steps) == 0:
        return None
    i = representative_step(steps.duration)
    lo, hi = int(steps.start[i]), int(steps.end[i])
    ev = trace.events
    category = _categories(trace, steps.source)
    events = np.flatnonzero((ev.end > lo) & (ev.start < hi) & (category >= 0))
    lane = _lanes(trace, events)
    events, lane = events[lane[:, 0] >= 0], lane[lane[:, 0] >= 0]
    parts = [(lane, np.maximum(ev.start[events], lo), np.minimum(ev.end[events], hi), category[events],
              ev.name[events])]
    names = list(trace.strings)
    for idle in gpu.idle:
        for cause, label in IDLE_CAUSES:
            gaps = iv.clip(getattr(idle, cause), lo, hi)
            names.append(label)
            n = len(gaps)
            key = np.array([[_GPU, idle.device, _IDLE_STREAM, 0]] * n, dtype=np.int64).reshape(n, 4)
            parts.append((key, gaps.starts, gaps.ends, np.full(n, _CAT[f"idle_{cause}"]), np.full(n, len(names) - 1)))
    key, start, end, cat, name = (np.concatenate([p[j] for p in parts]) for j in range(5))
    keep = np.sort(np.argsort(start - end, kind="stable")[:max_spans])  # the longest spans
    keys, row = np.unique(key[keep].reshape(-1, 4), axis=0, return_inverse=True)
    used_names, name_index = np.unique(name[keep], return_inverse=True)
    return StepTimeline(
        step_id=steps.ids[i],
        start_us=_us(lo),
        duration_us=_us(hi - lo),
        rows=tuple(_row(trace, k) for k in keys.tolist()),
        categories=CATEGORIES,
        names=tuple(names[n] for n in used_names.tolist()),
        spans=TimelineSpans(row=tuple(row.ravel().tolist()), start_us=_us_all(start[keep] - lo),
                            dur_us=_us_all(end[keep] - start[keep]), category=tuple(cat[keep].tolist()),
                            name=tuple(name_index.ravel().tolist())),
        syncs=_syncs(trace, syncs, lo, hi, [tuple(k) for k in keys.tolist()]),
        left_out=len(start) - len(keep),
    )


_HOST, _GPU = 0, 1
_RUNTIME_LANE = HOST_DEPTH  # the runtime lane comes after a thread's op lanes
_IDLE_STREAM = 1 << 62  # the idle row comes after its device's streams


def _categories(trace: Trace, step_source: str) -> np.ndarray:
    """Each event's span category index, -1 for events not drawn (step ranges, Python frames, others)."""
    masks = category_masks(trace, step_source)
    category = np.full(len(trace.events), -1, dtype=np.int8)
    for name in reversed(CATEGORIES[:7]):  # the highest priority is written last
        category[masks[name]] = _CAT[name]
    category[trace.events.kind == Kind.PYTHON] = -1  # Python frames nest deep; the ops say what ran
    return category


def _lanes(trace: Trace, events: np.ndarray) -> np.ndarray:
    """A sortable row key per event: (host, pid, tid, depth or runtime lane) or (gpu, device, stream, 0);
    host ops deeper than HOST_DEPTH get a key of -1s and are left out."""
    ev = trace.events
    gpu = trace.is_gpu_activity[events]
    runtime = ev.kind[events] == Kind.RUNTIME
    depth = np.where(runtime, _RUNTIME_LANE, 0).astype(np.int64)
    ops = np.flatnonzero(~gpu & ~runtime)
    thread = thread_numbers(ev.pid[events[ops]], ev.tid[events[ops]])
    for t in distinct(thread):
        mine = ops[thread == t]  # sorted by start, longer first at equal starts, as the table is
        ends = np.sort(ev.end[events[mine]])
        depth[mine] = np.maximum(np.arange(len(mine)) - np.searchsorted(ends, ev.start[events[mine]], "right"), 0)
    key = np.stack([np.where(gpu, _GPU, _HOST), np.where(gpu, ev.device[events], ev.pid[events]),
                    np.where(gpu, ev.stream[events], ev.tid[events]), np.where(gpu, 0, depth)], axis=1)
    key[~gpu & ~runtime & (depth >= HOST_DEPTH)] = -1
    return key.astype(np.int64)


def _row(trace: Trace, key: list[int]) -> TimelineRow:
    side, a, b, lane = key
    if side == _GPU:
        if b == _IDLE_STREAM:
            return TimelineRow(label=f"GPU {a} idle", kind="idle")
        return TimelineRow(label=f"GPU {a} stream {b}", kind="gpu")
    thread = trace.meta.thread_names.get((a, b), "").strip() or f"thread {b}"
    if lane == _RUNTIME_LANE:
        return TimelineRow(label=f"{thread} · runtime", kind="runtime")
    return TimelineRow(label=thread if lane == 0 else f"{thread} · depth {lane}", kind="host")


def _syncs(trace: Trace, syncs: SyncSummary, lo: int, hi: int,
           keys: list[tuple[int, ...]]) -> tuple[TimelineSync, ...]:
    ev = trace.events
    rows = syncs.rows[(ev.start[syncs.rows] >= lo) & (ev.start[syncs.rows] < hi)]
    points = sync_points(trace, rows)
    index = {k: i for i, k in enumerate(keys)}
    result = []
    for j, r in enumerate(rows.tolist()):
        row = index.get((_HOST, int(ev.pid[r]), int(ev.tid[r]), _RUNTIME_LANE))
        if row is None:
            continue  # its lane was left out with the shortest spans
        result.append(TimelineSync(row=row, start_us=_us(ev.start[r] - lo), dur_us=_us(ev.dur[r]),
                                   api=trace.name_of(r), op=points.op[j], location=points.location[j]))
    return tuple(result)


def _us_all(ns: np.ndarray) -> tuple[float, ...]:
    return tuple(_us(v) for v in ns.tolist())
