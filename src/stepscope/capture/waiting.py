"""Whether the profiler waits past `--skip` (the default one; a `--skip N` given is exact), so that the steps before
the window, the report's headline, stand for the job's step and not its warm-up."""

from __future__ import annotations

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
    def span_ns(self, source: str | None) -> int: ...


def why_wait(meter: Steps, leader: str | None, completed: int, skip: int) -> str | None:
    """The reason to wait one more step (a key of REASONS), or None to start the profiler now."""
    if not skip or completed >= SETTLE_LIMIT * skip:
        return None
    if meter.warming(leader):
        return "warming"
    if meter.span_ns(leader) < MIN_BEFORE_NS:
        return "short"
    return None


def waited_note(completed: int, skip: int, reasons: set[str]) -> str | None:
    """The note saying the profiler started later than --skip, and why; None when it did not."""
    if completed <= skip:
        return None
    why = " and ".join(text for reason, text in REASONS.items() if reason in reasons)
    limit = (f"; still at {completed} (--skip {skip} x {SETTLE_LIMIT}, the most it waits)"
             if completed >= SETTLE_LIMIT * skip else "")
    return f"the profiler started after {completed} steps, not --skip {skip}: {why}{limit}"
