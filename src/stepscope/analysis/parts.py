"""The parts of each step, whichever analysis can tell them: the GPU attribution's (costs.py) on a GPU run, the
CPU parts (hostwork.py) on a CPU run, the host's DataLoader and collective ranges on other accelerators."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.breakdown import Breakdown
from stepscope.analysis.costs import StepCosts
from stepscope.analysis.hostwork import cpu_host_work, cpu_parts, host_work
from stepscope.analysis.steps import Steps
from stepscope.trace.model import Trace


@dataclass(frozen=True)
class StepParts:
    """Per step, ns in each part of the step as recorded, and the host work inside each part (what the profiler's
    overhead inflates; empty where it cannot be told)."""

    parts: dict[str, np.ndarray]
    host_work: dict[str, np.ndarray]


def step_parts(trace: Trace, steps: Steps, breakdown: Breakdown, costs: StepCosts | None) -> StepParts:
    if costs is not None:
        return StepParts(dict(costs.parts), dict(costs.host_work or {}))
    if trace.platform == "cpu":
        parts = cpu_parts(trace, steps, breakdown)
        return StepParts(parts, cpu_host_work(parts, host_work(trace, steps)))
    names = ("dataloader", "communication")
    return StepParts({c: breakdown.per_step[:, breakdown.categories.index(c)].astype(np.float64) for c in names}, {})
