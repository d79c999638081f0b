"""Who makes the others wait, and why: per rank, the share of collectives it arrived last at and the wait it
caused; the straggler's cause is what grew in its lead-in to the collectives it was late for, against the
median rank's lead-in to the same collectives."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.ranks.align import Alignment
from stepscope.ranks.summary import LEAD_IN_CATEGORIES, RankSummary

# A rank is named the straggler when the wait it causes each other rank is at least this share of a step.
STRAGGLER_MIN_WAIT_SHARE = 0.05


@dataclass(frozen=True)
class RankWaits:
    """Per rank (in the summaries' order); ns totals over the profiled steps."""

    collectives: np.ndarray  # shared collectives it took part in
    arrived_last: np.ndarray  # how many of them it arrived last at
    wait: np.ndarray  # its own waiting in collectives
    wait_caused: np.ndarray  # the others' waiting at the collectives it arrived last at, summed over ranks
    steps: np.ndarray  # steps in which it has a shared collective (at least 1): the "per step" divisor

    @property
    def last_share(self) -> np.ndarray:
        return np.divide(self.arrived_last, self.collectives, out=np.zeros(len(self.collectives)),
                         where=self.collectives > 0)


@dataclass(frozen=True)
class Cause:
    """The lead-in category that grew most on the straggler, against the median rank (ns over the late
    collectives), with both lead-ins in full."""

    category: str
    straggler_ns: int
    median_ns: int
    straggler_lead_in: dict[str, int]
    median_lead_in: dict[str, int]


@dataclass(frozen=True)
class Straggler:
    index: int
    median: int  # the median of the other ranks, the straggler's yardstick
    late_collectives: int
    wait_caused_per_rank_step: float  # ns: what each other rank waited for it, per step
    cause: Cause | None


def rank_waits(al: Alignment, summaries: list[RankSummary]) -> RankWaits:
    present = al.present
    n_ranks = present.shape[0]
    steps = np.array([max(len(np.unique(s.collectives.step[rows][s.collectives.step[rows] >= 0])), 1)
                      for s, (rows, _) in zip(summaries, al.placement, strict=True)], dtype=np.int64)
    if present.shape[1] == 0:
        zeros = np.zeros(n_ranks)
        return RankWaits(np.zeros(n_ranks, np.int64), np.zeros(n_ranks, np.int64), zeros, zeros, steps)
    last = al.last
    wait = np.where(present, al.wait, 0.0)
    others_wait = wait.sum(axis=0) - wait[last, np.arange(len(last))]
    return RankWaits(
        collectives=present.sum(axis=1),
        arrived_last=np.bincount(last, minlength=n_ranks),
        wait=wait.sum(axis=1),
        wait_caused=np.bincount(last, weights=others_wait, minlength=n_ranks),
        steps=steps,
    )


def median_rank(own_time: np.ndarray) -> int:
    """The rank at the (lower) median of the time it spends on its own work per step."""
    return int(np.argsort(own_time, kind="stable")[(len(own_time) - 1) // 2])


def find_straggler(summaries: list[RankSummary], al: Alignment, waits: RankWaits, own_time: np.ndarray,
                   step_ns: float) -> Straggler | None:
    """The rank that caused the most waiting, when each other rank waits for it a material share of a step;
    its cause is read against the median of the other ranks."""
    if len(summaries) < 2 or not waits.wait_caused.any():
        return None
    index = int(np.argmax(waits.wait_caused))
    per_rank_step = float(waits.wait_caused[index]) / (len(summaries) - 1) / waits.steps[index]
    if step_ns <= 0 or per_rank_step < STRAGGLER_MIN_WAIT_SHARE * step_ns:
        return None
    others = np.array([i for i in range(len(summaries)) if i != index])
    median = int(others[median_rank(own_time[others])])
    return Straggler(index=index, median=median, late_collectives=int(waits.arrived_last[index]),
                     wait_caused_per_rank_step=per_rank_step, cause=straggler_cause(summaries, al, index, median))


def straggler_cause(summaries: list[RankSummary], al: Alignment, straggler: int, median: int) -> Cause | None:
    late = np.flatnonzero(al.last == straggler)
    late = late[al.present[median, late]]
    if len(late) == 0 or straggler == median:
        return None
    mine, theirs = _lead_in(summaries, al, straggler, late), _lead_in(summaries, al, median, late)
    excess = mine - theirs
    k = int(np.argmax(excess))
    if excess[k] <= 0:
        return None
    return Cause(category=LEAD_IN_CATEGORIES[k], straggler_ns=int(mine[k]), median_ns=int(theirs[k]),
                 straggler_lead_in=dict(zip(LEAD_IN_CATEGORIES, mine.astype(int).tolist(), strict=True)),
                 median_lead_in=dict(zip(LEAD_IN_CATEGORIES, theirs.astype(int).tolist(), strict=True)))


def _lead_in(summaries: list[RankSummary], al: Alignment, rank: int, columns: np.ndarray) -> np.ndarray:
    """The rank's lead-in breakdown summed over the given collectives (columns of the alignment)."""
    rows, cols = al.placement[rank]
    at = np.full(len(al.keys), -1, dtype=np.int64)
    at[cols] = rows
    picked = at[columns]
    return summaries[rank].collectives.lead_in[picked[picked >= 0]].sum(axis=0)
