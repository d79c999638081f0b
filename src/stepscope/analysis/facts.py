"""All analyses of one trace, computed once, here, and handed on together (to advice, to the report, to the
annotated trace); nothing caches one elsewhere. Code that turns the figures into words or places (the user's
line of a fix, the cause of a sync) calls a few of their functions on the Facts' trace (docs/architecture.md)."""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.analysis.annotations import Annotations, annotations
from stepscope.analysis.batch import InferredBatch, inferred_batch
from stepscope.analysis.breakdown import Breakdown, step_breakdown
from stepscope.analysis.copies import CopySummary, copy_summary
from stepscope.analysis.costs import StepCosts, step_costs
from stepscope.analysis.flops import FlopCount, count_flops
from stepscope.analysis.gpu import GpuUsage, gpu_usage
from stepscope.analysis.kernels import KernelSummary, kernel_summary
from stepscope.analysis.memory import DeviceMemory, memory_summary
from stepscope.analysis.memory_usage import DevicePeak, device_peaks
from stepscope.analysis.parts import StepParts, step_parts
from stepscope.analysis.signals import Signals, compute_signals
from stepscope.analysis.steps import Steps, find_steps
from stepscope.analysis.syncs import SyncSummary, sync_summary
from stepscope.analysis.time_by_line import LineSummary, line_summary
from stepscope.analysis.time_by_module import ModuleSummary, module_summary
from stepscope.analysis.timeline import StepTimeline, step_timeline
from stepscope.analysis.utilization import Utilization, utilization
from stepscope.trace.census import RunCensus
from stepscope.trace.model import Trace


@dataclass(frozen=True)
class Facts:
    """Every analysis of one trace, computed once: what advice, prediction and the report read."""

    trace: Trace
    steps: Steps
    breakdown: Breakdown
    gpu: GpuUsage
    kernels: KernelSummary
    syncs: SyncSummary
    copies: CopySummary
    memory: tuple[DeviceMemory, ...]
    costs: StepCosts | None  # step-time attribution; GPU runs only
    parts: StepParts  # the parts of each step (GPU: the attribution's; CPU: compute, Python, ...) and their host work
    signals: Signals  # what the advice rules weigh beyond the above
    lines: LineSummary | None  # time by user line, when the trace carries source information
    modules: ModuleSummary | None
    annotations: Annotations  # idle gaps, sync points and DataLoader waits, for annotated traces
    timeline: StepTimeline | None  # the median step, drawn in the HTML report
    flops: FlopCount | None  # FLOPs and bytes per op, when shapes were recorded
    utilization: Utilization | None  # MFU, roofline per kernel
    memory_peaks: tuple[DevicePeak, ...]  # the peak by category, memory over time, batch headroom
    census: RunCensus | None  # parameters, gradients, optimizer state as capture saw them
    batch: InferredBatch  # the batch size the recorded shapes show, for samples/s when none was given


def compute_facts(trace: Trace, step_range: str | None = None, census: RunCensus | None = None) -> Facts:
    steps = find_steps(trace, step_range)
    gpu = gpu_usage(trace, steps)
    syncs = sync_summary(trace, steps)
    flops = count_flops(trace, steps)
    breakdown = step_breakdown(trace, steps)
    costs = step_costs(trace, steps) if trace.platform == "gpu" else None
    return Facts(
        trace=trace,
        steps=steps,
        breakdown=breakdown,
        gpu=gpu,
        kernels=kernel_summary(trace, steps),
        syncs=syncs,
        copies=copy_summary(trace, steps),
        memory=memory_summary(trace),
        costs=costs,
        parts=step_parts(trace, steps, breakdown, costs),
        signals=compute_signals(trace, steps),
        lines=line_summary(trace, steps),
        modules=module_summary(trace, steps),
        annotations=annotations(trace, steps, syncs, gpu),
        timeline=step_timeline(trace, steps, gpu, syncs),
        flops=flops,
        utilization=utilization(trace, steps, flops, census),
        memory_peaks=device_peaks(trace, steps, census),
        census=census,
        batch=inferred_batch(trace, steps),
    )
