"""Exclusive time per phase on the training thread, and the steps cut out of it.

A phase is entered and left by the meter's hooks; phases nest (a sync inside the forward, a backward inside an
LBFGS closure inside the optimizer step) and the innermost one is charged, so at any moment exactly one phase is
running and the phases' totals add up to the wall time since the clock started. A step is the difference of the
totals between two boundaries of one step source.

The hooks only append an event (a time and what happened, in one integer) to a list; the clock replays the events
later, about once a second, one by one here or at once with numpy (capture/meter/bulk.py, applied by `apply`). A
hook that runs once a millisecond runs with cold caches: the fewer the objects and calls it touches, the less it
costs the step (capture/meter/hooks.py).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DATA, FORWARD, BACKWARD, OPTIMIZER, SYNC, OTHER = range(6)
NAMED = 5  # the phases a step records; OTHER is its wall time less theirs
# Steps kept one by one per source; beyond it only their totals (a week-long --full run stays small in memory).
MAX_STEPS = 200_000
FIELDS = 2 + NAMED  # end_ns, wall_ns, then the named phases
# An event is `time_ns << SHIFT | code`: code ENTER + phase, LEAVE + phase, or MARK + the index of a step source
# (a step of it ended at that time). perf_counter_ns fits 58 bits for 9 years of uptime.
SHIFT = 5
CODE = (1 << SHIFT) - 1
ENTER, LEAVE, MARK = 0, 8, 16


@dataclass(frozen=True)
class Replayed:
    """What a batch of events adds up to, replayed at once (capture/meter/bulk.py)."""

    marks: list[int]  # the marks' source indices, in order
    times: list[int]  # their times
    totals: list[list[int]]  # the phases' totals (NAMED + 1) at each mark
    final: list[int]  # the totals after the last event
    since: int  # the last event's time
    first_enter: int | None  # the first phase entered, if any: its time
    marks_before_enter: int  # the marks before it (a source's first step starts there only after them)


class PhaseClock:
    """The totals of each phase so far, charged to the innermost phase open, replayed from the hooks' events."""

    __slots__ = ("_since", "_stack", "clock", "events", "on_mark", "push", "started", "totals")

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns,
                 on_mark: Callable[[int, int], None] | None = None) -> None:
        self.clock = clock
        self.on_mark = on_mark  # called at each mark replayed (source index, t), with the totals charged up to t
        self.totals = [0] * (NAMED + 1)
        self._stack = [OTHER]
        self._since = clock()
        self.started: int | None = None  # the first phase entered: the first step's start
        self.events: list[int] = []  # a list: array('q').append parses its argument (~10x the instructions)
        self.push = self.events.append  # what the hooks call: one C call per event

    def enter(self, phase: int) -> None:
        self.push(self.clock() << SHIFT | (ENTER + phase))

    def leave(self, phase: int) -> None:
        self.push(self.clock() << SHIFT | (LEAVE + phase))

    @property
    def since(self) -> int:
        """The time the totals are charged up to."""
        return self._since

    def open_only_other(self) -> bool:
        """No phase is open (the usual moment between steps): the events can be replayed in bulk."""
        return len(self._stack) == 1

    def take(self) -> list[int]:
        """The events so far, taken out of the list. Events appended meanwhile (by another thread) stay for the
        next call."""
        events = self.events
        n = len(events)
        pending = events[:n]
        del events[:n]
        return pending

    def catch_up(self) -> None:
        """Replay the events so far into the totals, calling `on_mark` at each mark."""
        if self.events:
            self.replay(self.take())

    def replay(self, pending: list[int]) -> None:
        totals, stack, since, on_mark = self.totals, self._stack, self._since, self.on_mark
        for event in pending:
            t, code = event >> SHIFT, event & CODE
            totals[stack[-1]] += t - since
            since = t
            if code < LEAVE:
                stack.append(code)
                if self.started is None:
                    self.started = t
            elif code < MARK:
                phase = code - LEAVE
                if stack[-1] == phase:
                    stack.pop()
                elif phase in stack:  # an exception skipped an inner phase's leave: close it too (never OTHER)
                    while stack.pop() != phase:
                        pass
            elif on_mark is not None:
                self._since = since
                on_mark(code - MARK, t)
                since = self._since
        self._since = since

    def apply(self, done: Replayed, *, marks: bool) -> None:
        """A batch replayed in bulk (capture/meter/bulk.py): with `marks`, each mark told to `on_mark` with the totals
        of its moment (the first phase entered before it counts as started); then the totals after the batch."""
        if marks and self.on_mark is not None:
            unstarted = done.marks_before_enter if self.started is None else 0
            for k, (index, t, totals) in enumerate(zip(done.marks, done.times, done.totals, strict=True)):
                if k == unstarted and self.started is None:
                    self.started = done.first_enter
                self.totals[:] = totals
                self._since = t
                self.on_mark(index, t)
        if self.started is None:
            self.started = done.first_enter
        self.totals[:] = done.final
        self._since = done.since

    def read(self) -> tuple[int, list[int]]:
        """Now, and the totals charged up to now (the events replayed first)."""
        self.catch_up()
        t = self.clock()
        self.totals[self._stack[-1]] += t - self._since
        self._since = t
        return t, self.totals


class StepLog:
    """The steps of one step source: each step's end, wall time and named phases (ns), from boundary to boundary."""

    __slots__ = ("_last", "_last_t", "count", "overflow", "rows")

    def __init__(self) -> None:
        self.rows = array("q")
        self.count = 0
        self.overflow = [0] * (1 + NAMED)  # wall and phases of the steps past MAX_STEPS
        self._last_t: int | None = None
        self._last: list[int] = [0] * NAMED

    def start(self, t: int, totals: list[int]) -> None:
        """The first step begins at `t` (before the source's first boundary)."""
        if self._last_t is None:
            self._last_t, self._last = t, totals[:NAMED]

    def boundary(self, t: int, totals: list[int]) -> None:
        last_t = self._last_t
        if last_t is not None:
            d, f, b, o, y = totals[0], totals[1], totals[2], totals[3], totals[4]  # unrolled: this runs every step
            last = self._last
            if self.count < MAX_STEPS:
                self.rows.extend((t, t - last_t, d - last[0], f - last[1], b - last[2], o - last[3], y - last[4]))
            else:
                for i, v in enumerate((t - last_t, d - last[0], f - last[1], b - last[2], o - last[3], y - last[4])):
                    self.overflow[i] += v
            self.count += 1
        self._last_t, self._last = t, totals[:NAMED]

    def extend(self, np: Any, times: list[int], totals: list[list[int]]) -> None:
        """Steps ending at `times` with the phases' `totals` at each end, at once (as `boundary` one by one); the
        caller keeps the count under MAX_STEPS and has a step started."""
        assert self._last_t is not None
        ends = np.asarray(times, dtype=np.int64)
        at = np.asarray(totals, dtype=np.int64)[:, :NAMED]
        walls = np.diff(np.concatenate(([self._last_t], ends)))
        phases = np.diff(np.vstack((np.asarray(self._last, dtype=np.int64), at)), axis=0)
        self.rows.frombytes(np.column_stack((ends, walls, phases)).astype(np.int64).tobytes())
        self.count += len(times)
        self._last_t, self._last = times[-1], totals[-1][:NAMED]

    def column(self, field: int, first: int = 0) -> list[int]:
        """One field of every step kept from the `first`: 0 end, 1 wall, 2.. the named phases."""
        return self.rows[first * FIELDS + field::FIELDS].tolist()
