"""All analyses of one trace, computed once and handed on together (to advice and to the report)."""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.analysis.breakdown import Breakdown, step_breakdown
from stepscope.analysis.copies import CopySummary, copy_summary
from stepscope.analysis.flops import FlopCount, count_flops
from stepscope.analysis.gpu import GpuUsage, gpu_usage
from stepscope.analysis.kernels import KernelSummary, kernel_summary
from stepscope.analysis.memory import DeviceMemory, memory_summary
from stepscope.analysis.memory_usage import DevicePeak, device_peaks
from stepscope.analysis.steps import Steps, find_steps
from stepscope.analysis.syncs import SyncSummary, sync_summary
from stepscope.analysis.utilization import Utilization, utilization
from stepscope.trace.census import RunCensus
from stepscope.trace.model import Trace


@dataclass(frozen=True)
class Facts:
    trace: Trace
    steps: Steps
    breakdown: Breakdown
    gpu: GpuUsage
    kernels: KernelSummary
    syncs: SyncSummary
    copies: CopySummary
    memory: tuple[DeviceMemory, ...]
    flops: FlopCount | None = None
    utilization: Utilization | None = None
    memory_peaks: tuple[DevicePeak, ...] = ()
    census: RunCensus | None = None


def compute_facts(trace: Trace, step_range: str | None = None, census: RunCensus | None = None) -> Facts:
    steps = find_steps(trace, step_range)
    flops = count_flops(trace, steps)
    return Facts(
        trace=trace,
        steps=steps,
        breakdown=step_breakdown(trace, steps),
        gpu=gpu_usage(trace, steps),
        kernels=kernel_summary(trace, steps),
        syncs=sync_summary(trace, steps),
        copies=copy_summary(trace, steps),
        memory=memory_summary(trace),
        flops=flops,
        utilization=utilization(trace, steps, flops, census),
        memory_peaks=device_peaks(trace, steps, census),
        census=census,
    )
