"""Samples per step, for samples/s and the cost per sample: as given (--batch-size, the API, a run's capture), else
as the trace's recorded shapes show it (analysis/batch.py), else none; and the report's note that says which."""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.analysis.facts import Facts

GIVEN = "given"
INFERRED = "inferred from the trace"


@dataclass(frozen=True)
class Batch:
    """The batch size the report uses, where it comes from, and what the report says of it."""

    size: int | None
    source: str | None  # GIVEN | INFERRED | None
    note: str | None  # what the report says of it; None when it was given


def batch_of(facts: Facts, given: int | None) -> Batch:
    """The batch size the report uses: a given one always wins."""
    if given:
        return Batch(given, GIVEN, None)
    inferred = facts.batch
    if inferred.size:
        return Batch(inferred.size, INFERRED,
                     f"batch size {inferred.size} inferred from the trace ({inferred.evidence}): samples/s and cost "
                     "per sample use it; --batch-size N sets it")
    return Batch(None, None, "no batch size: --batch-size N gives samples/s and cost per sample (the trace does not "
                             f"show it: {inferred.evidence})")
