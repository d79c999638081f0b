"""Line up the same collective across ranks: match by key, put every rank on one clock, and measure each
collective's arrival skew, its last rank, and every rank's wait.

Clocks: ranks on different hosts start their traces from different clocks. A collective completes on every
rank at about the same moment (none can finish before the last one arrived), so each rank's clock offset is
the median, over the collectives it shares, of its end time minus the consensus (median) end; three rounds
let the consensus settle when groups overlap. Waits do not need the clocks at all: a rank's wait is its
collective's duration minus the shortest duration any rank had for it (the last to arrive waits least).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.ranks.summary import RankSummary

OFFSET_ROUNDS = 3


@dataclass(frozen=True, eq=False)
class Alignment:
    """Ranks x collectives matrices (NaN where a rank has no such collective), in ns on one clock."""

    keys: tuple[str, ...]
    owner: np.ndarray  # (collectives, 2): (rank index, row) where each key's metadata was read
    arrival: np.ndarray  # aligned
    end: np.ndarray  # aligned
    duration: np.ndarray  # end - arrival, on each rank's own clock
    offset: np.ndarray  # per rank: what was subtracted from its times (ns), after the origins lined up
    placement: tuple[tuple[np.ndarray, np.ndarray], ...]  # per rank: (its collective rows, their columns)

    @property
    def present(self) -> np.ndarray:
        return ~np.isnan(self.arrival)

    @property
    def skew(self) -> np.ndarray:
        """Per collective: last arrival minus first, ns."""
        return np.nanmax(self.arrival, axis=0) - np.nanmin(self.arrival, axis=0)

    @property
    def last(self) -> np.ndarray:
        """Per collective: the index of the rank that arrived last."""
        return np.nanargmax(np.where(self.present, self.arrival, -np.inf), axis=0)

    @property
    def wait(self) -> np.ndarray:
        """Ranks x collectives: time spent in the collective beyond the shortest any rank needed."""
        return self.duration - np.nanmin(self.duration, axis=0)


def align(summaries: list[RankSummary]) -> Alignment:
    """Match the collectives shared by two ranks or more and put all ranks on one clock."""
    keys, owner, columns = _shared_keys(summaries)
    shape = (len(summaries), len(keys))
    arrival, end = np.full(shape, np.nan), np.full(shape, np.nan)
    origin = min((s.origin_us for s in summaries), default=0.0)
    for r, s in enumerate(summaries):
        rows, cols = columns[r]
        shift = float(np.rint((s.origin_us - origin) * 1000.0))  # lines up ranks that share a clock
        arrival[r, cols] = s.collectives.start[rows] + shift
        end[r, cols] = s.collectives.end[rows] + shift
    offset = _clock_offsets(end)
    return Alignment(keys=tuple(keys), owner=owner, arrival=arrival - offset[:, None], end=end - offset[:, None],
                     duration=end - arrival, offset=offset, placement=tuple(columns))


def _shared_keys(summaries: list[RankSummary]) -> tuple[list[str], np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """The keys present on two ranks or more (in first-seen order), where each was first seen, and for each
    rank the (row, column) pairs that place its collectives."""
    counts: dict[str, int] = {}
    for s in summaries:
        for key in dict.fromkeys(s.collectives.keys):  # a key twice on one rank counts once
            counts[key] = counts.get(key, 0) + 1
    keys = [k for k, n in counts.items() if n >= 2]
    index = {k: i for i, k in enumerate(keys)}
    owner = np.full((len(keys), 2), -1, dtype=np.int64)
    columns = []
    for r, s in enumerate(summaries):
        first: dict[int, int] = {}
        for row, key in enumerate(s.collectives.keys):
            col = index.get(key)
            if col is not None and col not in first:
                first[col] = row
        rows = np.fromiter(first.values(), dtype=np.int64, count=len(first))
        cols = np.fromiter(first.keys(), dtype=np.int64, count=len(first))
        new = owner[cols, 0] < 0
        owner[cols[new], 0] = r
        owner[cols[new], 1] = rows[new]
        columns.append((rows, cols))
    return keys, owner, columns


def _clock_offsets(end: np.ndarray) -> np.ndarray:
    """Per rank, how far its clock runs ahead of the consensus, from the collectives' end times."""
    offset = np.zeros(end.shape[0])
    if end.shape[1] == 0:
        return offset
    for _ in range(OFFSET_ROUNDS):
        consensus = np.nanmedian(end - offset[:, None], axis=0)
        deviation = end - consensus[None, :]
        has = ~np.isnan(deviation).all(axis=1)
        offset = np.zeros(end.shape[0])
        offset[has] = np.nanmedian(deviation[has], axis=1)
        offset -= np.median(offset[has]) if has.any() else 0.0
    return np.rint(offset)
