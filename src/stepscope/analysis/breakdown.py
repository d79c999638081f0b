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


def step_breakdown(trace: Trace, steps: Steps) -> Breakdown:
    """Give each category the part of each step not yet taken by a higher-priority category."""
    ev = trace.events
    masks = category_masks(trace, steps.source)
    taken = iv.EMPTY
    columns = []
    for name in BREAKDOWN_CATEGORIES[:-1]:
        rows = masks[name]
        events = iv.union(ev.start[rows], ev.end[rows])
        exclusive = iv.subtract(events, taken)
        columns.append(iv.coverage(exclusive, steps.start, steps.end))
        taken = iv.union(np.concatenate([taken.starts, exclusive.starts]), np.concatenate([taken.ends, exclusive.ends]))
    per_step = np.stack(columns, axis=1) if columns else np.zeros((len(steps), 0), dtype=np.int64)
    other = steps.duration - per_step.sum(axis=1)
    return Breakdown(BREAKDOWN_CATEGORIES, np.concatenate([per_step, other[:, None]], axis=1))
