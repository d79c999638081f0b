"""Whether the profiler waits past `--skip` (the default one; a `--skip N` given is exact), so that the steps before
the window, the report's headline, stand for the job's step and not its warm-up."""

from __future__ import annotations

import math
from typing import Protocol

# The profiler waits at most until this many times --skip steps have run (a short program must still reach its
# window) ...
SETTLE_LIMIT = 2
# ... while the step meter sees the steps still getting faster, or until they have run this long: ten 1 ms steps are
# still the job's warm-up (plain, steps 2-10 of the MLP workload ran 8-11% slower than steps 10-60), not its step.
MIN_BEFORE_NS = 100_000_000
REASONS = {"warming": "the steps were still getting faster (warming up)",
           "short": f"the steps before it had run under {MIN_BEFORE_NS / 1e9:g} s"}


class Steps(Protocol):
    """What the step meter answers (capture/meter/meter.py)."""

    def warming(self, source: str | None) -> bool: ...
    def span(self, source: str | None) -> tuple[int, int]: ...


def why_wait(meter: Steps, leader: str | None, completed: int, skip: int) -> tuple[str, int] | None:
    """The reason to wait (a key of REASONS) and how many steps to wait before asking again, or None to start the
    profiler now.

    Each question replays the meter's events and reads its steps (15-30 µs): asked at each of ten 1 ms steps it put
    those steps, which the headline stands on, 11% above the same steps of the plain run (2026-11-28). So steps too
    short to stand for the job are asked about once more, when at their pace they will have run long enough; the
    warm-up, only of steps that have (5 ms or more on average, at the default --skip)."""
    limit = SETTLE_LIMIT * skip
    if not skip or completed >= limit:
        return None
    span_ns, steps = meter.span(leader)
    if span_ns < MIN_BEFORE_NS:
        if steps < 1 or span_ns <= 0:
            return "short", 1
        return "short", min(max(math.ceil((MIN_BEFORE_NS - span_ns) * steps / span_ns), 1), limit - completed)
    if meter.warming(leader):
        return "warming", 1
    return None


def waited_note(completed: int, skip: int, reasons: set[str]) -> str | None:
    """The note saying the profiler started later than --skip, and why; None when it did not."""
    if completed <= skip:
        return None
    why = " and ".join(text for reason, text in REASONS.items() if reason in reasons)
    limit = (f"; still at {completed} (--skip {skip} x {SETTLE_LIMIT}, the most it waits)"
             if completed >= SETTLE_LIMIT * skip else "")
    return f"the profiler started after {completed} steps, not --skip {skip}: {why}{limit}"
