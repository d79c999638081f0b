"""Advice: the pattern language (which bottleneck holds the job back) and the fixes it calls for."""

from __future__ import annotations

from stepscope.analysis.facts import Facts
from stepscope.model import report as s


def advise(facts: Facts) -> tuple[list[s.Pattern], list[s.Recommendation]]:
    """Patterns (primary first) and recommendations (best estimated gain first)."""
    from stepscope.advice.context import Context
    from stepscope.advice.patterns import classify
    from stepscope.advice.rules import recommend

    ctx = Context(facts)
    patterns = classify(facts, ctx)
    return patterns, recommend(facts, patterns, ctx)
