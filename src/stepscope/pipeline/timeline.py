"""The timeline a report reads. For a trace read from a file it is the trace itself. For a live capture it is the
job as it runs: the timing pass's trace (else the recorded one) replayed with the profiler's cost per event taken
out (calibrated, else fitted to the unprofiled steps) and checked against the run's unprofiled steps
(stepscope.replay.deperturb: the one correction for the profiler's cost); what only the recorded
pass holds (lines, modules, FLOPs, memory: it records shapes, allocations and line ranges) comes from that trace,
and the MFU is taken over the replayed step."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from stepscope.analysis.facts import Facts, compute_facts
from stepscope.analysis.utilization import Utilization
from stepscope.pipeline.options import AnalyzeOptions
from stepscope.replay.deperturb import Deperturbed, deperturb
from stepscope.trace.census import read_census
from stepscope.trace.load import read_trace
from stepscope.trace.model import Trace


@dataclass(frozen=True)
class Timeline:
    """The facts the report reads and the trace they come from."""

    facts: Facts  # what the report is made of
    deperturbed: Deperturbed | None  # a live capture's replay (None for a trace read from a file)
    timeline_path: str  # the trace the steps' timeline comes from
    notes: tuple[str, ...] = ()  # the run folder's files beside the trace left out, and why


def timeline_facts(trace: Trace, options: AnalyzeOptions) -> Timeline:
    census = read_census(trace.meta.path)
    timing = _timing_trace(options.timing)
    base = timing if timing is not None else trace
    dep = None
    if options.reference is not None or options.calibration is not None:  # a live capture
        ref = options.reference
        dep = deperturb(base, options.calibration, ref.step_us * 1e3 if ref is not None and ref.step_us else None,
                        ref.method if ref is not None else None, ref.noise if ref is not None else 0.0)
        base = dep.trace
    facts = compute_facts(base, options.step_range, census=census)
    if timing is not None:
        facts = _with_attribution(facts, compute_facts(trace, options.step_range, census=census))
    return Timeline(facts, dep, (timing if timing is not None else trace).meta.path,
                    census.notes if census is not None else ())


def _timing_trace(timing: str | Path | Trace | None) -> Trace | None:
    if timing is None or isinstance(timing, Trace):
        return timing
    return read_trace(timing)


def _with_attribution(timeline: Facts, recorded: Facts) -> Facts:
    """The timeline's facts with what only the recorded pass holds."""
    return replace(timeline, lines=recorded.lines, modules=recorded.modules, flops=recorded.flops,
                   memory=recorded.memory, memory_peaks=recorded.memory_peaks,
                   utilization=_over_step(recorded.utilization, float(timeline.steps.duration.mean())
                                          if len(timeline.steps) else 0.0))


def _over_step(usage: Utilization | None, step_ns: float) -> Utilization | None:
    """The recorded pass's FLOPs (and roofline) over the timeline's step: MFU = model FLOPs / (step x peak)."""
    if usage is None or not usage.step_ns or step_ns <= 0:
        return usage
    ratio = usage.step_ns / step_ns

    def scaled(x: float | None) -> float | None:
        return x * ratio if x is not None else None

    return replace(usage, step_ns=step_ns, mfu=scaled(usage.mfu), hfu=scaled(usage.hfu),
                   mfu_of_achievable=scaled(usage.mfu_of_achievable))
