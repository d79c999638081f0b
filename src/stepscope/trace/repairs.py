"""What every reader repairs in the events it read, in order, each with a note: events written twice, runtime
calls on another thread than their ops, a device clock offset from the host's."""

from __future__ import annotations

from stepscope.trace.clock import device_clock_aligned
from stepscope.trace.links import without_repeats
from stepscope.trace.model import Events
from stepscope.trace.threads import runtime_on_op_threads


def repaired(events: Events, strings: tuple[str, ...], notes: list[str]) -> Events:
    """The events table with each repair applied; a table that needs none is returned as it is."""
    events = without_repeats(events, notes)
    events = runtime_on_op_threads(events, notes)
    return device_clock_aligned(events, strings, notes)
