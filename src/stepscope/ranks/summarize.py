"""The map side: one rank file in, one small RankSummary out (or a RankFailure saying why not)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stepscope.advice import advise
from stepscope.analysis.facts import compute_facts
from stepscope.errors import StepscopeError
from stepscope.ranks.collectives import find_collectives
from stepscope.ranks.summary import RankCollectives, RankFailure, RankSummary
from stepscope.ranks.timeshares import (
    compute_intervals,
    lead_in_breakdown,
    lead_in_windows,
    step_shares,
)
from stepscope.trace import intervals as iv
from stepscope.trace.collective_args import CollectiveArgs, collective_args, is_collective_name
from stepscope.trace.load import read_trace
from stepscope.trace.model import Trace


def summarize_file(path: str | Path, step_range: str | None = None) -> RankSummary | RankFailure:
    """Read and summarise one rank file. Never raises: a file that fails becomes a RankFailure, so one bad file
    among a thousand is reported and the others go on."""
    try:
        trace = read_trace(path)
        return summarize_trace(trace, step_range=step_range, args=collective_args_of(trace))
    except StepscopeError as exc:
        return RankFailure(str(path), exc.message.removeprefix(f"{path}: "))
    except MemoryError:
        return RankFailure(str(path), "out of memory while analysing this rank")
    except Exception as exc:  # a bug of ours on one file must not lose the other ranks
        return RankFailure(str(path), f"internal error ({type(exc).__name__}: {exc})")


def summarize_chunk(paths: list[str], step_range: str | None = None) -> list[RankSummary | RankFailure]:
    """Several files in one task: fewer, larger tasks cost a cluster's scheduler less per rank."""
    return [summarize_file(p, step_range) for p in paths]


def collective_args_of(trace: Trace) -> dict[tuple[int, str], CollectiveArgs]:
    """The collective args of a Kineto trace's file; only looked for when the trace holds collective events."""
    if trace.meta.format != "kineto" or not trace.names_where(is_collective_name).any():
        return {}
    return collective_args(trace.meta.path, trace.meta.origin_us)


def summarize_trace(trace: Trace, *, step_range: str | None = None,
                    args: dict[tuple[int, str], CollectiveArgs] | None = None) -> RankSummary:
    facts = compute_facts(trace, step_range)
    steps = facts.steps
    found = find_collectives(trace, steps, args or {})
    shares = step_shares(steps, compute_intervals(trace, steps, found.on_device), iv.union(found.start, found.end))
    lead_in = lead_in_breakdown(trace, steps, lead_in_windows(steps, found.start, found.end, found.step), found.start)
    patterns = advise(facts).patterns
    meta = trace.meta
    return RankSummary(
        path=meta.path, rank=meta.rank, world_size=meta.world_size, format=meta.format, origin_us=meta.origin_us,
        step_ids=steps.ids, step_start=np.asarray(steps.start), step_duration=np.asarray(steps.duration),
        breakdown=facts.breakdown.per_step, compute=shares.compute, communication=shares.communication,
        exposed_communication=shares.exposed_communication, idle=shares.idle,
        gpu_utilization=facts.gpu.utilization(steps),
        patterns=tuple(p.id for p in patterns),
        collectives=RankCollectives(
            keys=tuple(found.keys), names=tuple(found.names), groups=tuple(found.groups), seq=found.seq,
            bytes=found.bytes, issued=found.issued, start=found.start, end=found.end, step=found.step,
            lead_in=lead_in, on_device=found.on_device,
        ),
        notes=meta.notes,
    )
