"""Throughput without a profiler, at the step boundaries `stepscope run` detects (capture's hooks and arbiter).

The clock takes the place of a capture session for `StepHooks`: it is told of each step boundary, warms up until
the step is steady, then times windows of consecutive steps and stops the program. A window's figure is samples
(counted from the batches the main loader yields, else steps x the batch size, else steps) over its wall time,
with the device synchronised at the window's ends (on CUDA the host runs ahead: host timestamps of single steps
measure enqueueing). One synchronisation per window, never one per step.

Warm-up knows compilation: it lasts at least `warmup` steps and until STEADY_AFTER_COMPILE steps have passed
without compiling (compile, autotuning, CUDA graph capture); a window that a compilation fell in (a recompile on
the last partial batch of an epoch) is set aside, and so are first windows clearly slower than the next (the
end of a warm-up no count of steps foresaw). Either way another window is timed in its place.
"""

from __future__ import annotations

import _thread
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from stepscope.capture.arbiter import Mark, StepArbiter
from stepscope.capture.batch import stronger_batch_size
from stepscope.capture.session import StopProgram
from stepscope.stats import warming
from stepscope.tune.compiling import CompileWatch

ABORT_MIN_NS = 2e9  # a trial is stopped for slowness only after this much time in its slow steps
STEADY_AFTER_COMPILE = 2  # steps without compiling before the windows start (CUDA graphs record at the next one)
MAX_EXTRA_WARMUP = 200  # steps past the warm-up the clock waits for compiling to stop, at most
MAX_SET_ASIDE = 3  # windows set aside (warm-up, compilation), at most


@dataclass
class TimedWindow:
    steps: int
    samples: float
    seconds: float
    start_s: float  # from the first boundary
    first_stamp: int  # index in `stamps` of its first boundary
    kind: str = "timed"  # "timed" | "warm-up" (set aside: slower than the next) | "compiled" (a compilation in it)
    first_step: int = 0  # the leading source's completed steps when it opened
    timer: str = "host clock"  # who timed it: the step meter, or the clock itself (tune/meter_windows.py)
    phases_s: dict[str, float] = field(default_factory=dict)  # the meter's phases over it


class StepClock:
    def __init__(self, *, warmup: int, window_steps: int, window_seconds: float, windows: int,
                 abort_step_ns: float | None = None, compiles: CompileWatch | None = None,
                 now: Callable[[], int] = time.perf_counter_ns) -> None:
        # The first boundary starts a step; a second lets the optimizer take the lead from a first forward.
        self.warmup = max(warmup, 2)
        self.window_steps = max(window_steps, 1)
        self.window_ns = window_seconds * 1e9
        self.target = max(windows, 1)
        self.abort_step_ns = abort_step_ns
        self.compiles = compiles or CompileWatch()
        self._now = now
        self.burst_steps: Callable[[], int] = lambda: 0  # steps a loader's burst spans (its workers, plus one)
        self.arbiter = StepArbiter()
        self.on_leader: Callable[[str], None] | None = None
        self.batch_size: int | None = None
        self.batch_size_source: str | None = None
        self.finished = False
        self.stop_requested = False
        self.aborted = False
        self.stamps: list[int] = []  # host clock at each boundary of the leading source
        self.windows: list[TimedWindow] = []  # every window, set aside ones included
        self.compile_steps: set[int] = set()  # steps (by completed count) a compilation finished or ran in
        self.samples = 0.0  # counted from the main loader's batches
        self._counted = False
        self._clean = 0  # steps since the last compiling one
        self._events_seen = 0
        self._open: tuple[int, int, float, int] | None = None  # (first step, t0 ns, samples, compile events)
        self._open_stamp = 0
        self._cuda = False
        self._lock = threading.RLock()

    # -- what StepHooks and the loader point call -------------------------------------------------------

    def mark(self, source: str) -> None:
        if self.finished:
            return
        now = self._now()
        with self._lock:
            kind = self.arbiter.mark(source)
            if kind is Mark.IGNORE:
                return
            if kind is Mark.SWITCH:
                self.stamps = []
                if self.on_leader:
                    self.on_leader(source)
            self.stamps.append(now)
            done = self._advance(self.arbiter.completed, now)
        if done:
            self._stop_program()

    def add_samples(self, n: int | None) -> None:
        """A batch of `n` samples from the main loader (called in the main process, as the batch is yielded)."""
        if n:
            with self._lock:
                self.samples += n
                self._counted = True

    def set_batch_size(self, size: int | None, source: str) -> None:
        self.batch_size, self.batch_size_source = stronger_batch_size(
            (self.batch_size, self.batch_size_source), size, source)

    @property
    def completed(self) -> int:
        return self.arbiter.completed

    @property
    def unit(self) -> str:
        """What a window counts: "samples" (batches counted, or the user's batch size) or "steps"."""
        return "samples" if self._counted or self.batch_size_source == "user" else "steps"

    # -- warm-up and windows -----------------------------------------------------------------------------

    def _advance(self, completed: int, now: int) -> bool:
        """Warm up, open and close windows; True when the program should stop."""
        self.compiles.ready()
        compiled = self.compiles.events != self._events_seen or self.compiles.active
        self._events_seen = self.compiles.events
        if compiled:
            self.compile_steps.add(completed)
        self._clean = 0 if compiled else self._clean + 1
        if self._open is None:
            if completed >= self.warmup and (self._steady() or completed >= self.warmup + MAX_EXTRA_WARMUP):
                self._start(completed, now)
                return False
            return self._too_slow()
        first, t0, _, _ = self._open
        if completed - first >= self.window_steps and now - t0 >= self.window_ns:
            now = self._close(completed, now)
            if len(self.timed()) >= self.target or len(self.windows) - len(self.timed()) > MAX_SET_ASIDE:
                return True
            self._open = (completed, now, self._samples_now(completed), self.compiles.events)
            self._open_stamp = len(self.stamps) - 1
        return self._too_slow()

    def _steady(self) -> bool:
        return not self.compile_steps or self._clean >= STEADY_AFTER_COMPILE

    def _start(self, completed: int, now: int) -> None:
        import torch

        # A loader with W workers delivers in bursts of up to W batches: a window spans two bursts at least.
        self.window_steps = max(self.window_steps, 2 * self.burst_steps())
        self._cuda = bool(torch.cuda.is_available() and torch.cuda.is_initialized())
        if self._cuda:
            torch.cuda.synchronize()
            now = self._now()
        self._open = (completed, now, self._samples_now(completed), self.compiles.events)
        self._open_stamp = len(self.stamps) - 1

    def _close(self, completed: int, now: int) -> int:
        """End the open window at this boundary (synchronised with the device); the time it ended."""
        if self._cuda:
            import torch

            torch.cuda.synchronize()
            now = self._now()
        assert self._open is not None
        first, t0, samples0, events0 = self._open
        self._open = None
        kind = "compiled" if self.compiles.events != events0 or self.compiles.active else "timed"
        window = TimedWindow(steps=completed - first, samples=self._samples_now(completed) - samples0,
                             seconds=(now - t0) / 1e9, start_s=(t0 - self.stamps[0]) / 1e9,
                             first_stamp=self._open_stamp, kind=kind, first_step=first)
        self.windows.append(window)
        timed = self.timed()
        if len(timed) == 2 and len(self.windows) - len(timed) < MAX_SET_ASIDE:
            # Still warming up by the one rule (stats.warming) over the two windows' steps: the first window's set
            # aside. Without a step's stamps in them, their rates stand for one step each.
            first, second = (self._window_step_ns(w) or [w.seconds / max(w.samples, 1)] for w in timed)
            if warming(first, second) is not None:
                timed[0].kind = "warm-up"
        return now

    def _window_step_ns(self, w: TimedWindow) -> list[float]:
        """The window's steps by the host clock's boundaries (on CUDA the window's rate is what is synchronised)."""
        end = min(w.first_stamp + w.steps, len(self.stamps) - 1)
        return [float(self.stamps[i + 1] - self.stamps[i]) for i in range(w.first_stamp, end)]

    def _samples_now(self, completed: int) -> float:
        if self.batch_size_source == "user" and self.batch_size:
            return float(completed * self.batch_size)
        return self.samples if self._counted else float(completed)

    def _too_slow(self) -> bool:
        """Steady steps far slower than the reference's (compiling ones aside): stop now, the answer is known."""
        if self.abort_step_ns is None or len(self.stamps) < 3:
            return False
        # stamps[i] is boundary i + 1: the step from stamps[i] to stamps[i + 1] is step i + 2
        later = [self.stamps[i + 1] - self.stamps[i] for i in range(1, len(self.stamps) - 1)
                 if i + 2 not in self.compile_steps]
        if later and statistics.median(later) > self.abort_step_ns and \
                sum(later) > max(ABORT_MIN_NS, 3 * self.abort_step_ns):
            self.aborted = True
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
        """The program has ended (or was stopped): the compile watch comes off."""
        self.compiles.remove()

    @property
    def timing(self) -> str:
        return "synchronised windows" if self._cuda else "host clock"

    def timed(self) -> list[TimedWindow]:
        return [w for w in self.windows if w.kind == "timed"]

    def warmup_s(self) -> float:
        """From the first boundary to the first timed window (set-aside windows included)."""
        timed = self.timed()
        if timed:
            return timed[0].start_s
        return (self.stamps[-1] - self.stamps[0]) / 1e9 if len(self.stamps) > 1 else 0.0

    def warmup_ns(self) -> list[float]:
        """The warm-up's steps (host clock), before the first window."""
        end = self.windows[0].first_stamp if self.windows else len(self.stamps) - 1
        return [float(self.stamps[i + 1] - self.stamps[i]) for i in range(end)]

    def step_ns(self) -> list[float]:
        """Host-clock steps inside the timed windows (information: the figures are the windows')."""
        return [float(self.stamps[i + 1] - self.stamps[i]) for w in self.timed()
                for i in range(w.first_stamp, w.first_stamp + w.steps) if i + 1 < len(self.stamps)]
