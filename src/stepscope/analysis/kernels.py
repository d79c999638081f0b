"""Kernels: counts per step, the top kernels by time, tensor-core share, and launch statistics."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.categories import is_collective_kernel
from stepscope.analysis.launches import launching_call
from stepscope.analysis.steps import Steps
from stepscope.analysis.tensor_cores import is_tensor_core_kernel
from stepscope.trace.model import Kind, Trace

SHORT_KERNEL_NS = 10_000  # kernels under 10 µs cost about as much to launch as to run
TOP_KERNELS = 15


@dataclass(frozen=True)
class KernelStat:
    """One kernel name's time in the steps."""

    name: str
    count: int
    total_ns: int
    mean_ns: float
    share: float  # of all kernel time in the steps
    tensor_core: bool
    collective: bool


@dataclass(frozen=True)
class KernelSummary:
    """The steps' kernels: counts, time, tensor-core time, launch delays and the names that take most."""

    count: int  # kernels in the steps
    count_per_step: np.ndarray
    total_ns: int
    tensor_core_ns: int
    short_count: int  # under SHORT_KERNEL_NS
    launch_delay_ns: np.ndarray  # kernel start minus its launch call's start, for linked kernels
    top: tuple[KernelStat, ...]
    distinct: int

    @property
    def tensor_core_share(self) -> float | None:
        return self.tensor_core_ns / self.total_ns if self.total_ns else None

    @property
    def short_share(self) -> float | None:
        return self.short_count / self.count if self.count else None


def kernel_summary(trace: Trace, steps: Steps) -> KernelSummary:
    ev = trace.events
    rows = np.flatnonzero(ev.kind == Kind.KERNEL)
    step_of = steps.index_of(ev.start[rows])
    rows, step_of = rows[step_of >= 0], step_of[step_of >= 0]
    dur = ev.dur[rows]
    names = ev.name[rows]
    tc_lut = np.fromiter((is_tensor_core_kernel(s) for s in trace.strings), bool, len(trace.strings))
    tensor_core_ns = int(dur[tc_lut[names]].sum()) if len(rows) else 0
    launcher = launching_call(trace)[rows]
    linked = launcher >= 0
    delay = ev.start[rows[linked]] - ev.start[launcher[linked]]

    total = int(dur.sum())
    per_name = np.bincount(names, weights=dur, minlength=len(trace.strings)) if len(rows) else np.zeros(0)
    count_name = np.bincount(names, minlength=len(trace.strings)) if len(rows) else np.zeros(0, dtype=np.int64)
    top_ids = np.argsort(-per_name, kind="stable")[:TOP_KERNELS] if len(rows) else []
    top = tuple(
        KernelStat(
            name=trace.strings[i], count=int(count_name[i]), total_ns=int(per_name[i]),
            mean_ns=float(per_name[i] / count_name[i]), share=float(per_name[i] / total) if total else 0.0,
            tensor_core=bool(tc_lut[i]), collective=is_collective_kernel(trace.strings[i]),
        )
        for i in top_ids if count_name[i] > 0
    )
    return KernelSummary(
        count=len(rows),
        count_per_step=np.bincount(step_of, minlength=len(steps)),
        total_ns=total,
        tensor_core_ns=tensor_core_ns,
        short_count=int((dur < SHORT_KERNEL_NS).sum()),
        launch_delay_ns=delay,
        top=top,
        distinct=int((count_name > 0).sum()) if len(rows) else 0,
    )
