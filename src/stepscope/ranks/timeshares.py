"""Where one rank's time goes around its collectives: compute, communication (exposed or hidden) and idle per
step, and what it did in the lead-in to each collective (since its previous collective ended)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.breakdown import exclusive_categories
from stepscope.analysis.categories import COLLECTIVE_LAUNCHER, category_masks
from stepscope.analysis.steps import Steps
from stepscope.analysis.syncs import is_sync_api
from stepscope.ranks.summary import LEAD_IN_CATEGORIES
from stepscope.trace import intervals as iv
from stepscope.trace.model import Kind, Trace


@dataclass(frozen=True)
class StepShares:
    """Per step, ns: compute, communication, the part of communication no compute overlaps, and idle."""

    compute: np.ndarray
    communication: np.ndarray
    exposed_communication: np.ndarray
    idle: np.ndarray


def compute_intervals(trace: Trace, steps: Steps, on_device: bool) -> iv.Intervals:
    """A GPU rank computes when a kernel, copy or memset runs; a CPU-only rank (gloo) when a host op runs that is
    not a step range, a DataLoader wait, nor part of a collective."""
    ev = trace.events
    masks = category_masks(trace, steps.source)
    if on_device:
        rows = masks["kernel"] | masks["memcpy"] | masks["memset"]
    else:
        launcher = trace.names_where(lambda s: COLLECTIVE_LAUNCHER.match(s) is not None)
        rows = (masks["cpu_exec"] | masks["dataloader"]) & ~launcher & ~masks["communication"]
    return iv.union(ev.start[rows], ev.end[rows])


def step_shares(steps: Steps, compute: iv.Intervals, communication: iv.Intervals) -> StepShares:
    lo, hi = steps.start, steps.end
    busy = iv.merge(compute, communication)
    return StepShares(
        compute=iv.coverage(compute, lo, hi),
        communication=iv.coverage(communication, lo, hi),
        exposed_communication=iv.coverage(iv.subtract(communication, compute), lo, hi),
        idle=(hi - lo) - iv.coverage(busy, lo, hi),
    )


def lead_in_windows(steps: Steps, start: np.ndarray, end: np.ndarray, step: np.ndarray) -> np.ndarray:
    """For collectives sorted by arrival, where each lead-in begins: the latest end of an earlier collective,
    or for the first one its step's start (its own arrival when it lies outside the steps)."""
    first = np.where(step >= 0, steps.start[np.maximum(step, 0)], start) if len(steps) else start.copy()
    if len(end) == 0:
        return first
    prev_end = np.maximum.accumulate(np.concatenate([end[:1], end[:-1]]))
    lo = np.where(np.arange(len(end)) == 0, first, prev_end)
    return np.minimum(lo, start)


def lead_in_breakdown(trace: Trace, steps: Steps, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The exclusive breakdown of each window, with sync calls split out of the runtime calls."""
    ev = trace.events
    exclusive = exclusive_categories(trace, steps.source)
    sync_rows = (ev.kind == Kind.RUNTIME) & trace.names_where(is_sync_api)
    sync = iv.intersect(exclusive["runtime"], iv.union(ev.start[sync_rows], ev.end[sync_rows]))
    columns = []
    for name in LEAD_IN_CATEGORIES[:-1]:
        if name == "sync":
            columns.append(iv.coverage(sync, lo, hi))
        elif name == "runtime":
            columns.append(iv.coverage(iv.subtract(exclusive["runtime"], sync), lo, hi))
        else:
            columns.append(iv.coverage(exclusive[name], lo, hi))
    table = np.stack(columns, axis=1) if len(lo) else np.zeros((0, len(columns)), dtype=np.int64)
    other = (hi - lo) - table.sum(axis=1)
    return np.concatenate([table, other[:, None]], axis=1).astype(np.int64)
