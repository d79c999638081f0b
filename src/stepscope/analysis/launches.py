"""The launch link: which runtime call enqueued each GPU activity, through correlation ids."""

from __future__ import annotations

import numpy as np

from stepscope.trace.growing import mapped_empty
from stepscope.trace.links import launch_pairs
from stepscope.trace.model import NONE, Trace


def launching_call(trace: Trace) -> np.ndarray:
    """For every row, the row of the runtime call that launched it (GPU activities only), else -1;
    computed once per trace.

    The join on correlation ids (trace.links.launch_pairs); an id that names no single launch links nothing.
    """
    return trace.derived("launching_call", lambda: _launching_call(trace))


def _launching_call(trace: Trace) -> np.ndarray:
    ev = trace.events
    # Row numbers fit in int32 below 2**31 rows: half the memory of an index kept for the trace's lifetime.
    result = mapped_empty(len(ev), np.int32 if len(ev) < 2**31 else np.int64)  # kept with the trace: out of the heap
    result.fill(NONE)
    gpu, calls = launch_pairs(ev, trace.strings)
    result[gpu] = calls
    result.flags.writeable = False
    return result


def carry_launching_call(trace: Trace, rows: np.ndarray, derived: Trace) -> None:
    """Give `derived`, a table made of the trace's `rows` (in its order) with only times changed, the trace's launch
    links renumbered, instead of the join again: the join reads kinds, correlation ids and names, which `derived`
    keeps; `rows` holds every runtime call and GPU activity (only the GPU projections of host ranges may go)."""
    links = launching_call(trace)
    new_row = np.full(len(links), NONE, dtype=links.dtype)
    new_row[rows] = np.arange(len(rows), dtype=links.dtype)
    taken = links[rows]
    carried = np.where(taken >= 0, new_row[np.maximum(taken, 0)], NONE).astype(links.dtype)
    carried.flags.writeable = False
    derived.derived("launching_call", lambda: carried)


def launched_in_gap(trace: Trace, activity_rows: np.ndarray, gap_starts: np.ndarray,
                    gap_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For idle gaps of a device (sorted), whether an activity of `activity_rows` (sorted by start) ends
    each gap, and whether that activity's launching call began after the gap began: the device waited
    for the host (HTA's host wait). The one gap classification behind GPU idle and step-time attribution."""
    ev = trace.events
    if len(activity_rows) == 0:
        none = np.zeros(len(gap_starts), dtype=bool)
        return none, none.copy()
    nxt = np.searchsorted(ev.start[activity_rows], gap_ends, side="left")
    has_next = nxt < len(activity_rows)
    launcher = launching_call(trace)[activity_rows[np.minimum(nxt, len(activity_rows) - 1)]]
    launched = has_next & (launcher >= 0)
    after = np.zeros(len(gap_starts), dtype=bool)
    after[launched] = ev.start[launcher[launched]] > gap_starts[launched]
    return has_next, after
