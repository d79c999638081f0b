"""Advice: the pattern language (which bottleneck holds the job back) and the fixes it calls for."""

from __future__ import annotations

from dataclasses import dataclass, field

from stepscope.advice.context import Context
from stepscope.advice.meter import on_meter, workers_from_meter
from stepscope.advice.patterns import classify
from stepscope.advice.recommendation import MIN_GAIN
from stepscope.advice.restarts import persistent_from_meter
from stepscope.advice.rules import recommend
from stepscope.analysis.facts import Facts
from stepscope.model import report as s


@dataclass(frozen=True)
class Advice:
    """The verdict's patterns, the recommended fixes, the fixes left out and the notes on how."""

    patterns: list[s.Pattern]  # primary first
    recommendations: list[s.Recommendation]  # best estimated gain first
    notes: list[str] = field(default_factory=list)  # how the verdict was taken (no steps found, one-off steps, meter)
    considered: list[s.Considered] = field(default_factory=list)  # fixes weighed and left out, with why


def advise(facts: Facts, run: s.Run | None = None, *, replayed: bool = False, meter: s.Meter | None = None) -> Advice:
    """Patterns and recommendations; a live capture's `run` section lets them know what the program has already
    set; `replayed`: the facts are of a timeline replayed without the profiler's cost (stepscope.replay.deperturb,
    the one correction for it). With the step `meter`'s figures the data wait is the meter's (advice/meter.py)."""
    ctx = Context(facts, run, replayed)
    patterns = classify(facts, ctx)
    recommendations, considered = recommend(facts, patterns, ctx)
    notes = ctx.notes() if len(facts.steps) else []
    if meter is not None:
        patterns, meter_notes = on_meter(patterns, meter)
        settings = run.settings if run is not None else None
        recommendations = workers_from_meter(meter, settings, recommendations)
        recommendations = persistent_from_meter(meter, settings, recommendations)
        notes = [*notes, *meter_notes]
    recommendations, below = worth_a_change(recommendations)
    return Advice(patterns, recommendations, notes, [*considered, *below])


def worth_a_change(recs: list[s.Recommendation]) -> tuple[list[s.Recommendation], list[s.Considered]]:
    """The fixes whose final estimate reaches MIN_GAIN; the rest move to "considered, not recommended" with their
    estimate: a fix estimated at 0.97x or 1.00x is not worth the reader's change. Fixes without an estimate stay."""
    keep = [r for r in recs if r.estimated_speedup is None or r.estimated_speedup >= MIN_GAIN]
    below = [s.Considered(id=r.id, reason=f"estimated {r.estimated_speedup:.2f}x, under the {MIN_GAIN:.2f}x a "
                                          f"recommendation needs" + (f": {r.estimate}" if r.estimate else ""),
                          estimated_speedup=r.estimated_speedup)
             for r in recs if r.estimated_speedup is not None and r.estimated_speedup < MIN_GAIN]
    return keep, below
