"""GPU utilisation per step and device, and GPU idle time split into host wait, kernel wait and other."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.launches import launched_in_gap
from stepscope.analysis.steps import Steps
from stepscope.trace import intervals as iv
from stepscope.trace.model import Kind, Trace, distinct

# HTA's threshold: a gap shorter than this between kernels already enqueued is launch overhead.
KERNEL_WAIT_NS = 30


@dataclass(frozen=True)
class IdleIntervals:
    """One device's idle gaps inside the steps, as intervals (ns from the trace's start) by cause."""

    device: int
    host_wait: iv.Intervals
    kernel_wait: iv.Intervals
    other: iv.Intervals


@dataclass(frozen=True)
class DeviceUsage:
    """One device over the steps: busy time (a kernel running) and the idle time by cause, per step."""

    device: int
    busy: np.ndarray  # ns per step with at least one kernel running
    host_wait: np.ndarray  # idle ns per step because the next kernel was not launched yet
    kernel_wait: np.ndarray  # idle ns per step in gaps shorter than KERNEL_WAIT_NS
    other_idle: np.ndarray  # the rest: waits on events, copies, syncs
    idle: IdleIntervals  # the same gaps as intervals, for timelines and trace tracks

    def share(self, steps: Steps) -> float:
        """Its busy share of the total step time: DESIGN.md's GPU utilisation, for this device."""
        return float(self.busy.sum() / max(float(steps.duration.sum()), 1.0))


@dataclass(frozen=True)
class GpuUsage:
    """Each device's busy and idle time, and which device is the busiest."""

    devices: tuple[DeviceUsage, ...]
    primary: int | None  # index into devices of the busiest device, None without kernels

    def utilization(self, steps: Steps) -> float | None:
        """The GPU utilisation of the steps (the busiest device's busy share; every figure of it in the report,
        the prediction and the rank rows is this one); None without kernels or steps."""
        if self.primary is None or float(steps.duration.sum()) <= 0:
            return None
        return self.devices[self.primary].share(steps)

    def utilization_per_step(self, steps: Steps) -> np.ndarray | None:
        """Per step, the busiest device's busy share."""
        if self.primary is None:
            return None
        duration = np.maximum(steps.duration, 1)
        return self.devices[self.primary].busy / duration

    @property
    def idle(self) -> tuple[IdleIntervals, ...]:
        return tuple(d.idle for d in self.devices)


def gpu_usage(trace: Trace, steps: Steps) -> GpuUsage:
    """Kernel time only (copies and memsets excluded); idle gaps classified per device, HTA's way."""
    ev = trace.events
    kernels = ev.kind == Kind.KERNEL
    if not kernels.any() or len(steps) == 0:
        return GpuUsage((), None)
    window = (int(steps.start[0]), int(steps.end[-1]))
    inside = iv.union(steps.start, steps.end)
    usages = []
    for device in distinct(ev.device[kernels]):
        rows = np.flatnonzero(kernels & (ev.device == device))
        busy = iv.union(ev.start[rows], ev.end[rows])
        gaps = iv.complement(busy, *window)
        host, kernel_wait, other = (iv.intersect(g, inside) for g in _classify_gaps(gaps, rows, trace))
        usages.append(
            DeviceUsage(
                device=int(device),
                busy=iv.coverage(busy, steps.start, steps.end),
                host_wait=iv.coverage(host, steps.start, steps.end),
                kernel_wait=iv.coverage(kernel_wait, steps.start, steps.end),
                other_idle=iv.coverage(other, steps.start, steps.end),
                idle=IdleIntervals(int(device), host, kernel_wait, other),
            )
        )
    primary = int(np.argmax([u.busy.sum() for u in usages]))
    return GpuUsage(tuple(usages), primary)


def _classify_gaps(gaps: iv.Intervals, kernel_rows: np.ndarray,
                   trace: Trace) -> tuple[iv.Intervals, iv.Intervals, iv.Intervals]:
    """Each gap takes the cause of the kernel that ends it: host wait if that kernel's launch call began
    after the GPU went idle, kernel wait if the gap is under KERNEL_WAIT_NS, else other."""
    if len(gaps) == 0:
        return iv.EMPTY, iv.EMPTY, iv.EMPTY
    has_next, is_host = launched_in_gap(trace, kernel_rows, gaps.starts, gaps.ends)
    is_kernel_wait = has_next & ~is_host & ((gaps.ends - gaps.starts) < KERNEL_WAIT_NS)
    is_other = ~is_host & ~is_kernel_wait

    def pick(mask: np.ndarray) -> iv.Intervals:
        return iv.Intervals(gaps.starts[mask], gaps.ends[mask])

    return pick(is_host), pick(is_kernel_wait), pick(is_other)
