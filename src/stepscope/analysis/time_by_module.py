"""Time by module path (`model.layer1.0.conv1`), forward and backward apart, with and without children."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.source_map import source_map
from stepscope.analysis.steps import Steps
from stepscope.analysis.time_by_line import Cost, costs_by
from stepscope.trace.model import Trace


@dataclass(frozen=True)
class ModuleCost:
    """One module's time: with the modules it calls, and alone."""

    path: str
    total: Cost  # the module and every module it calls
    own: Cost  # the module alone: ops not inside a child module
    calls: int  # forward calls over the steps


@dataclass(frozen=True)
class ModuleSummary:
    """The steps' time by module path."""

    source: str
    steps: int
    step_ns: int
    modules: tuple[ModuleCost, ...]  # in path order: parents before their children


def _add(a: Cost, b: Cost) -> Cost:
    return Cost(a.cpu_fwd_ns + b.cpu_fwd_ns, a.cpu_bwd_ns + b.cpu_bwd_ns, a.gpu_fwd_ns + b.gpu_fwd_ns,
                a.gpu_bwd_ns + b.gpu_bwd_ns, a.kernels_fwd + b.kernels_fwd, a.kernels_bwd + b.kernels_bwd,
                a.cpu_fwd_data_ns + b.cpu_fwd_data_ns, a.cpu_fwd_optimizer_ns + b.cpu_fwd_optimizer_ns)


def _ancestors(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def module_summary(trace: Trace, steps: Steps) -> ModuleSummary | None:
    """Time by module over the steps; None when the trace carries no module ranges."""
    sm = source_map(trace)
    if sm is None or not sm.modules or len(steps) == 0:
        return None
    own = costs_by(sm, trace, steps, sm.module, len(sm.modules))
    index = {path: i for i, path in enumerate(sm.modules)}
    total = list(own)
    for i, path in enumerate(sm.modules):
        for ancestor in _ancestors(path):
            if ancestor in index:
                total[index[ancestor]] = _add(total[index[ancestor]], own[i])
    called = steps.index_of(trace.events.start[sm.module_rows], host=True) >= 0
    calls = np.bincount(sm.module_of_row[called], minlength=len(sm.modules))
    rows = [ModuleCost(path, total[i], own[i], int(calls[i])) for i, path in enumerate(sm.modules)
            if calls[i] or total[i].cpu_ns or total[i].gpu_ns]
    rows.sort(key=lambda m: m.path.split("."))
    return ModuleSummary(source=sm.source, steps=len(steps), step_ns=int(steps.duration.sum()), modules=tuple(rows))
