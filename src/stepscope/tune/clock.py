"""Step timing without a profiler, at the step boundaries `stepscope run` detects (capture's hooks and arbiter).

The clock takes the place of a capture session for `StepHooks`: it is told of each step boundary, skips the
warm-up, then times a slice of steps and stops the program. On CUDA the host runs ahead of the device, so host
timestamps of single steps measure enqueueing: there the slice is bracketed by one `torch.cuda.synchronize()`
at each end and the steps inside it are timed with CUDA events recorded at the boundaries (never a sync per
step). On a CPU the host clock is the step.
"""

from __future__ import annotations

import _thread
import itertools
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from stepscope.capture.arbiter import Mark, StepArbiter
from stepscope.capture.batch import stronger_batch_size
from stepscope.capture.session import StopProgram

ABORT_MIN_NS = 2e9  # a trial is stopped for slowness only after this much time in its slow steps


class StepClock:
    def __init__(self, *, warmup: int, steps: int, min_seconds: float, abort_step_ns: float | None = None) -> None:
        # The first boundary starts a step; a second lets the optimizer take the lead from a first forward.
        self.warmup = max(warmup, 2)
        self.steps = steps
        self.min_ns = min_seconds * 1e9
        self.abort_step_ns = abort_step_ns
        self.arbiter = StepArbiter()
        self.on_leader: Callable[[str], None] | None = None
        self.batch_size: int | None = None
        self.batch_size_source: str | None = None
        self.finished = False
        self.stop_requested = False
        self.aborted = False
        self.stamps: list[int] = []  # host clock at each boundary of the leading source
        self._t0: int | None = None
        self._t1: int | None = None
        self._events: list[Any] = []
        self._cuda = False
        self._lock = threading.RLock()

    # -- what StepHooks calls ----------------------------------------------------------------------

    def mark(self, source: str) -> None:
        if self.finished:
            return
        now = time.perf_counter_ns()
        with self._lock:
            kind = self.arbiter.mark(source)
            if kind is Mark.IGNORE:
                return
            if kind is Mark.SWITCH:
                self.stamps = []
                if self.on_leader:
                    self.on_leader(source)
            self.stamps.append(now)
            done = self._advance(self.arbiter.completed)
        if done:
            self._stop_program()

    def set_batch_size(self, size: int | None, source: str) -> None:
        self.batch_size, self.batch_size_source = stronger_batch_size(
            (self.batch_size, self.batch_size_source), size, source)

    @property
    def completed(self) -> int:
        return self.arbiter.completed

    # -- the slice ---------------------------------------------------------------------------------

    def _advance(self, completed: int) -> bool:
        """Start the slice after the warm-up, record its boundaries, end it; True when the program should stop."""
        if completed == self.warmup:
            self.arbiter.lock()
            self._start_slice()
            return False
        if completed < self.warmup:
            return self._too_slow(self.stamps)
        if self._cuda:
            self._record_event()
        timed = completed - self.warmup
        if timed >= self.steps and self.stamps[-1] - (self._t0 or 0) >= self.min_ns:
            self._end_slice()
            return True
        return self._too_slow(self.stamps)

    def _start_slice(self) -> None:
        import torch

        self._cuda = bool(torch.cuda.is_available() and torch.cuda.is_initialized())
        if self._cuda:
            torch.cuda.synchronize()
            self._record_event()
        self._t0 = time.perf_counter_ns()

    def _record_event(self) -> None:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._events.append(event)

    def _end_slice(self) -> None:
        if self._cuda:
            import torch

            torch.cuda.synchronize()
        self._t1 = time.perf_counter_ns()

    def _too_slow(self, stamps: list[int]) -> bool:
        """The steps after the first are far slower than the baseline's: stop now, the answer is known."""
        if self.abort_step_ns is None or len(stamps) < 3:
            return False
        later = [b - a for a, b in itertools.pairwise(stamps[1:])]
        if statistics.median(later) > self.abort_step_ns and sum(later) > max(ABORT_MIN_NS, 3 * self.abort_step_ns):
            self.aborted = True
            self._end_slice()
            return True
        return False

    def _stop_program(self) -> None:
        self.finished = True
        if self.on_leader:
            self.on_leader("")  # no hook is needed any more
        self.stop_requested = True
        if threading.current_thread() is threading.main_thread():
            raise StopProgram
        _thread.interrupt_main()

    # -- results -----------------------------------------------------------------------------------

    def close(self) -> None:
        """The program has ended: a slice still open ends at its last boundary."""
        if self._t0 is not None and self._t1 is None and self._cuda:
            import torch

            torch.cuda.synchronize()  # the events recorded so far can be read

    @property
    def timing(self) -> str:
        return "cuda events" if self._cuda else "host clock"

    def warmup_ns(self) -> list[float]:
        first = self.stamps[: self.warmup]
        return [float(b - a) for a, b in itertools.pairwise(first)]

    def step_ns(self) -> list[float]:
        """The timed steps: device time between boundary events on CUDA, host time on a CPU."""
        if self._t0 is None:
            return []
        if self._cuda:
            return [1e6 * a.elapsed_time(b) for a, b in itertools.pairwise(self._events)]
        timed = self.stamps[self.warmup - 1:]
        return [float(b - a) for a, b in itertools.pairwise(timed)]

    def slice_ns(self) -> float | None:
        """The timed slice end to end: between the two syncs on CUDA, the two boundaries on a CPU; the sum of
        the steps when the program ended inside the slice."""
        if self._t0 is None:
            return None
        if self._t1 is None:
            steps = self.step_ns()
            return float(sum(steps)) if steps else None
        return float(self._t1 - self._t0)
