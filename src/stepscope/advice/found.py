"""A pattern that holds, before it is the report's: its id, title, evidence and cost in each step. The pattern
functions (patterns.py, cpu_patterns.py) make them from the step's parts; `ranked` turns them into the report's
Patterns, costliest first, once."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from stepscope.advice.context import Context
from stepscope.model import report as s
from stepscope.units import rounded_ratio

# Below 5% of the step a cause is within step-to-step noise and not worth a code change.
MIN_SHARE = 0.05


@dataclass(frozen=True)
class Found:
    """A pattern that holds, with its cost per step (ns) for the per-step verdict."""

    id: str
    share: float  # of the typical steps, as the report carries it
    title: str
    evidence: dict[str, Any]
    per_step: np.ndarray

    def adding(self, title: str = "", **evidence: Any) -> Found:
        """The same finding with words added to its title and figures to its evidence."""
        return dataclasses.replace(self, title=self.title + title, evidence={**self.evidence, **evidence})


def make(pattern_id: str, ctx: Context, per_step: np.ndarray, title: str, evidence: dict[str, Any]) -> Found:
    """A pattern with its share of the typical steps."""
    typical = ctx.typical
    share = float(per_step[typical].sum() / max(ctx.durations[typical].sum(), 1.0))
    return Found(pattern_id, rounded_ratio(share), title, evidence, per_step)


def from_parts(ctx: Context, pattern_id: str, parts: tuple[str, ...], title: str,
               evidence: dict[str, Any]) -> Found:
    """A pattern whose cost is the named parts of the step."""
    per_step = np.asarray(sum(ctx.parts[p] for p in parts), dtype=np.float64)
    return make(pattern_id, ctx, per_step, title, evidence)


def costliest_first(found: list[Found]) -> list[Found]:
    return sorted(found, key=lambda f: -f.share)


def ranked(found: list[Found], step_ids: tuple[str, ...], durations: np.ndarray) -> list[s.Pattern]:
    """The report's patterns, costliest first; each learns its share in each step and the steps where it is the
    costliest (and costs at least MIN_SHARE of that step)."""
    found = costliest_first(found)
    if not found:
        return []
    shares = np.stack([f.per_step for f in found]) / np.maximum(durations, 1)
    winner = np.where(shares.max(axis=0) >= MIN_SHARE, shares.argmax(axis=0), -1)
    return [
        s.Pattern(id=f.id, share=f.share, title=f.title, evidence={
            **f.evidence,
            "share_per_step": {sid: rounded_ratio(v) for sid, v in zip(step_ids, shares[i], strict=True)},
            "primary_in_steps": [sid for sid, w in zip(step_ids, winner, strict=True) if w == i],
        })
        for i, f in enumerate(found)
    ]
