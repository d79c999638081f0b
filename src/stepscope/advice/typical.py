"""The steps the verdict is taken over: one-off steps aside.

The first step, when it takes more than ONE_OFF_RATIO times the median of at least three, is a one-off (a
start-up or first-call cost, or the profiler's own first active step, which on a GPU carries the tracer's
start): the verdict's shares are taken over the other steps, so that one step cannot decide the verdict of
all. A slow step later in the window is kept: it may recur (every fourth batch waits for the workers).
"""

from __future__ import annotations

import numpy as np

from stepscope.units import ns_text

# A first step this much longer than the median step is a one-off.
ONE_OFF_RATIO = 1.25


def typical_steps(durations: np.ndarray) -> np.ndarray:
    """Mask of the steps the verdict is taken over: all but the one-offs."""
    n = len(durations)
    keep = np.ones(n, dtype=bool)
    if n < 3:
        return keep
    keep[0] = durations[0] <= ONE_OFF_RATIO * float(np.median(durations))
    return keep


def one_off_note(ids: tuple[str, ...], durations: np.ndarray, typical: np.ndarray) -> str | None:
    if typical.all():
        return None
    median = float(np.median(durations))
    which = [f"step {sid} ({ns_text(d)}, {d / median:.1f}x the median)" for sid, d, t in zip(ids, durations, typical,
                                                                                       strict=True) if not t]
    return (f"{', '.join(which)} left out of the verdict as a one-off (a start-up or first-call cost, or the "
            "profiler's own first active step); its figures are still in the step table")
