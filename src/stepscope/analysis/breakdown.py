"""Step-time breakdown, exclusive by priority: kernel > memcpy > memset > communication > runtime >
dataloader > cpu_exec > other (the PyTorch profiler TensorBoard plugin's definition)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.categories import BREAKDOWN_CATEGORIES, category_masks
from stepscope.analysis.steps import Steps
from stepscope.trace import intervals as iv
from stepscope.trace.model import Trace


@dataclass(frozen=True)
class Breakdown:
    """Per step, ns in each category; the categories of a step add up exactly to its duration."""

    categories: tuple[str, ...]
    per_step: np.ndarray  # shape (steps, categories), int64 ns

    def mean(self) -> dict[str, float]:
        values = self.per_step.mean(axis=0) if len(self.per_step) else np.zeros(len(self.categories))
        return dict(zip(self.categories, (float(v) for v in values), strict=True))


def exclusive_categories(trace: Trace, step_source: str) -> dict[str, iv.Intervals]:
    """Each category's time not taken by a higher-priority one ('other' excluded: it is the remainder)."""
    ev = trace.events
    masks = category_masks(trace, step_source)
    taken = iv.EMPTY
    exclusive: dict[str, iv.Intervals] = {}
    last = BREAKDOWN_CATEGORIES[-2]
    for name in BREAKDOWN_CATEGORIES[:-1]:
        rows = masks[name]
        own = iv.union_of(ev.start, ev.dur, rows)
        exclusive[name] = iv.subtract(own, taken)
        if name != last:  # taken | own is taken | exclusive[name]: the same set
            taken = iv.merge(taken, own)
    return exclusive


def window_breakdown(trace: Trace, step_source: str, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The breakdown of any windows [lo, hi) (shape: windows x categories, int64 ns); rows add up to hi - lo.

    A category's exclusive time in a window is what it adds there to the union of the higher-priority ones,
    |taken | own| - |taken|: exactly the coverage of its set in exclusive_categories, from one growing union and
    no set differences (whose sweeps, and the sets held together, were tens of MB on a trace of gigabytes)."""
    ev = trace.events
    masks = category_masks(trace, step_source)
    taken = iv.EMPTY
    before = np.zeros(len(lo), dtype=np.int64)
    columns = []
    for name in BREAKDOWN_CATEGORIES[:-1]:
        taken = iv.merge(taken, iv.union_of(ev.start, ev.dur, masks[name]))
        now = iv.coverage(taken, lo, hi)
        columns.append(now - before)
        before = now
    del taken
    per_window = np.stack(columns, axis=1) if len(lo) else np.zeros((0, len(columns)), dtype=np.int64)
    other = (np.asarray(hi, np.int64) - np.asarray(lo, np.int64)) - per_window.sum(axis=1)
    return np.concatenate([per_window, other[:, None]], axis=1)


def step_breakdown(trace: Trace, steps: Steps) -> Breakdown:
    """Give each category the part of each step not yet taken by a higher-priority category."""
    return Breakdown(BREAKDOWN_CATEGORIES, window_breakdown(trace, steps.source, steps.start, steps.end))
