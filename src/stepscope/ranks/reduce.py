"""The reduce side: rank summaries in, every cross-rank figure out (no trace is ever needed here)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from stepscope.ranks.align import Alignment, align
from stepscope.ranks.stragglers import RankWaits, Straggler, find_straggler, median_rank, rank_waits
from stepscope.ranks.summary import RankSummary

CLOCK_NOTE_NS = 1_000_000  # mention the clock alignment when some rank's clock was this far off


@dataclass(frozen=True, eq=False)
class CrossRankAnalysis:
    summaries: tuple[RankSummary, ...]  # sorted by rank, then path
    alignment: Alignment
    waits: RankWaits
    step_ids: tuple[str, ...]
    step_times: np.ndarray  # ranks x steps, ns (NaN where a rank lacks the step)
    step_waits: np.ndarray  # ranks x steps, ns waited in collectives issued in the step
    own_time: np.ndarray  # per rank: mean step time less its wait per step, ns
    slowest: int
    fastest: int
    median: int
    straggler: Straggler | None
    notes: tuple[str, ...]
    duplicate_ranks: tuple[int, ...]  # rank numbers claimed by more than one file


def rank_order(summary: RankSummary) -> tuple[bool, int, str]:
    return (summary.rank is None, summary.rank if summary.rank is not None else 0, summary.path)


def cross_rank(summaries: list[RankSummary]) -> CrossRankAnalysis:
    summaries = sorted(summaries, key=rank_order)
    al = align(summaries)
    waits = rank_waits(al, summaries)
    step_ids = _step_ids(summaries)
    step_times, step_waits = _per_step(summaries, al, step_ids)
    mean_step = np.array([s.step_time_ns if s.step_time_ns is not None else np.nan for s in summaries])
    own_time = mean_step - waits.wait / waits.steps
    timed = np.flatnonzero(~np.isnan(mean_step))
    slowest = int(timed[np.argmax(mean_step[timed])]) if len(timed) else 0
    fastest = int(timed[np.argmin(mean_step[timed])]) if len(timed) else 0
    median_step = float(np.nanmedian(mean_step)) if len(timed) else 0.0
    straggler = find_straggler(summaries, al, waits, np.nan_to_num(own_time), median_step)
    median = straggler.median if straggler else median_rank(np.nan_to_num(own_time))
    return CrossRankAnalysis(
        summaries=tuple(summaries), alignment=al, waits=waits, step_ids=step_ids, step_times=step_times,
        step_waits=step_waits, own_time=own_time, slowest=slowest, fastest=fastest, median=median,
        straggler=straggler, notes=_notes(summaries, al), duplicate_ranks=_duplicates(summaries),
    )


def _step_ids(summaries: list[RankSummary]) -> tuple[str, ...]:
    """Every step id any rank has, numerically ordered when they are numbers."""
    ids = list(dict.fromkeys(i for s in summaries for i in s.step_ids))
    if all(i.isdigit() for i in ids):
        ids.sort(key=int)
    return tuple(ids)


def _per_step(summaries: list[RankSummary], al: Alignment, step_ids: tuple[str, ...]) -> tuple[np.ndarray, ...]:
    column = {i: k for k, i in enumerate(step_ids)}
    times = np.full((len(summaries), len(step_ids)), np.nan)
    waits = np.full((len(summaries), len(step_ids)), np.nan)
    wait = np.where(al.present, al.wait, 0.0) if al.present.shape[1] else al.arrival
    for r, s in enumerate(summaries):
        cols = np.array([column[i] for i in s.step_ids], dtype=np.int64)
        times[r, cols] = s.step_duration
        waits[r, cols] = 0.0
        rows, keys = al.placement[r]
        step = s.collectives.step[rows]
        inside = step >= 0
        np.add.at(waits[r], cols[step[inside]], wait[r, keys[inside]])
    return times, waits


def _duplicates(summaries: list[RankSummary]) -> tuple[int, ...]:
    claimed = Counter(s.rank for s in summaries if s.rank is not None)
    return tuple(sorted(r for r, n in claimed.items() if n > 1))


def _notes(summaries: list[RankSummary], al: Alignment) -> tuple[str, ...]:
    notes = []
    twice = _duplicates(summaries)
    if twice:
        shown = ", ".join(str(r) for r in twice[:10]) + (" ..." if len(twice) > 10 else "")
        notes.append(f"{len(twice)} rank number(s) claimed by more than one file ({shown}): each file is "
                     "analysed as its own rank; check the folder holds one job")
    worlds = {s.world_size for s in summaries if s.world_size}
    if len(worlds) == 1 and (world := worlds.pop()) != len(summaries):
        notes.append(f"the traces say world size {world}, and {len(summaries)} rank files were analysed")
    if len(al.offset) and np.abs(al.offset).max() >= CLOCK_NOTE_NS:
        notes.append(f"rank clocks differed by up to {np.abs(al.offset).max() / 1e6:,.1f} ms; they were aligned "
                     "on the collectives' end times")
    if summaries and not len(al.keys):
        notes.append("no collective appears on two ranks or more: no skew, wait or straggler can be measured")
    return tuple(notes)
