"""One target GPU: scale the origin's GPU work to it, replay the steps, and analyse the replayed trace with the
same definitions as a measured one (steps, utilisation, the pattern that bounds the step)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.advice.context import Context
from stepscope.advice.patterns import classify
from stepscope.analysis.facts import Facts, compute_facts
from stepscope.predict.gpus import Roofs
from stepscope.predict.scaling import scale
from stepscope.predict.work import GpuWork
from stepscope.replay import HostCost, replay
from stepscope.trace import intervals as iv
from stepscope.trace.model import DeviceInfo, Trace


@dataclass(frozen=True)
class StepView:
    """What a (measured or replayed) trace's steps come to."""

    step_ns: float  # mean step time
    gpu_ns: float  # mean GPU busy time per step on the device (kernels, copies, memsets)
    utilization: float | None  # kernel-busy share of the steps, as the report defines it
    bottleneck: str | None  # the primary pattern id
    bottleneck_share: float | None


@dataclass(frozen=True)
class TargetRun:
    """The step replayed on a target GPU: its roofs, its view and what was assumed."""

    roofs: Roofs
    view: StepView
    assumptions: tuple[str, ...]
    trace: Trace  # the replayed trace


def gpu_busy_ns(trace: Trace, facts: Facts, device: int) -> float:
    """Mean time per step the device has any activity running."""
    ev = trace.events
    mask = trace.is_gpu_activity & (ev.device == device)
    steps = facts.steps
    if len(steps) == 0:
        return 0.0
    busy = iv.union(ev.start[mask], ev.end[mask])
    return float(iv.coverage(busy, steps.start, steps.end).mean())


def view(facts: Facts, device: int) -> StepView:
    steps = facts.steps
    if len(steps) == 0:
        return StepView(0.0, 0.0, None, None, None)
    patterns = classify(facts, Context(facts))
    return StepView(
        step_ns=float(steps.duration.mean()),
        gpu_ns=gpu_busy_ns(facts.trace, facts, device),
        utilization=facts.gpu.utilization(steps),
        bottleneck=patterns[0].id if patterns else None,
        bottleneck_share=patterns[0].share if patterns else None,
    )


def origin_replayed(facts: Facts, host_cost: HostCost, step_range: str | None = None) -> Facts:
    """The origin's facts with the profiler's `host_cost` taken out (a recorded trace: replay/recorded.py decides it),
    the GPU work as measured: the step the targets are compared with, replayed on the same host as theirs."""
    return compute_facts(replay(facts.trace, host_cost=host_cost), step_range)


def run_target(facts: Facts, device: int, work: GpuWork, origin: Roofs, target: Roofs, host_speed: float = 1.0,
               step_range: str | None = None, host_cost: HostCost | None = None) -> TargetRun:
    """The origin's steps replayed with its GPU work scaled to `target`, the host `host_speed` times as fast and,
    for a recorded trace, the profiler's `host_cost` taken out of the host (as `origin_replayed` takes it out of the
    origin's step)."""
    trace = facts.trace
    scaled = scale(work, trace.events.dur[work.rows], origin, target)
    spec = target.spec
    memory = spec.memory_bytes()
    info = DeviceInfo(id=device, name=spec.name, kind="cuda" if spec.vendor == "nvidia" else "rocm",
                      total_memory_bytes=memory, sm_count=int(spec.sm_count.value) if spec.sm_count.value else None)
    replayed = replay(trace, device=device, rows=work.rows, new_dur=scaled.dur, host_speed=host_speed,
                      host_cost=host_cost, device_info=info)
    new_facts = compute_facts(replayed, step_range)
    notes = list(scaled.assumptions)
    if host_speed != 1.0:
        notes.append(f"the host runs host code {host_speed:g}x as fast as the origin's (--host-speed)")
    peak = _peak_memory(facts)
    if peak is not None and memory is not None and peak > memory:
        notes.append(f"the origin's peak reserved memory ({peak / 2**30:.1f} GiB) does not fit the "
                     f"{spec.name}'s {memory / 2**30:.0f} GiB: the job as it is would not run there")
    return TargetRun(roofs=target, view=view(new_facts, device), assumptions=tuple(notes), trace=replayed)


def _peak_memory(facts: Facts) -> int | None:
    peaks = [m.peak_reserved_bytes or m.peak_allocated_bytes for m in facts.memory if m.device >= 0]
    peaks = [p for p in peaks if p]
    return int(np.max(peaks)) if peaks else None
