"""A capture session: step boundaries in, one profiled window out, with unprofiled step times around it.

Everything that captures (the `run` verb's hooks, the Python API, the trainer callbacks) reports step
boundaries here with `mark(source)`; the session picks the leading source, times unprofiled steps, starts
the profiler after the skipped steps, advances it, writes the trace when the window is complete, and
times more unprofiled steps after it, so the profiler's own overhead can be measured and corrected.

A window of steps that may not be training steps (model forwards or DataLoader batches with no backward
pass seen yet, or backward passes with no optimizer step yet) is provisional: the program is not stopped
after it, and if a training source shows up later its window replaces the provisional one. A program that
never trains keeps the provisional window, said to be inference or evaluation only.
"""

from __future__ import annotations

import _thread
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from stepscope.capture.arbiter import PRIORITY, Mark, StepArbiter
from stepscope.capture.batch import stronger_batch_size
from stepscope.capture.cycle import DONE, REFERENCE, SKIP, WINDOW, Cycle
from stepscope.capture.options import CaptureOptions
from stepscope.capture.outcome import capture_result
from stepscope.capture.result import CaptureResult
from stepscope.capture.settle import calibrate_window
from stepscope.capture.waiting import waited_note, why_wait
from stepscope.capture.window import ProfilerWindow
from stepscope.model.runfolder import TRACE

# Steps after the window before the reference slice: the first pays for the export (memory freed, caches cold).
SETTLE_STEPS = 1
# After a provisional window of backward passes, how many more to wait for an optimizer step (gradient
# accumulation) before taking backward passes as the steps (a loop that updates weights by hand).
WAIT_FOR_OPTIMIZER = 256
# Sources only a session hears of (stepscope.step(), the trainer callbacks): the meter's hooks see the others.
MARKED = tuple(source for source, rank in PRIORITY.items() if rank == 0)  # the arbiter's explicit marks


class StopProgram(BaseException):  # like SystemExit: not an error, and not caught by `except Exception`
    """Raised from a step hook once the window is recorded, to end the profiled program early."""


class WindowListener(Protocol):
    def window_started(self) -> None: ...
    def window_ended(self) -> None: ...


class CaptureSession:
    def __init__(
        self,
        spec: CaptureOptions,
        out_dir: Path,
        *,
        stop_when_done: bool = False,
        listeners: Sequence[WindowListener] = (),
        on_leader: Callable[[str], None] | None = None,
        trace_name: str = TRACE,
        sees_backward: bool = False,
    ) -> None:
        self.spec = spec
        self.out_dir = Path(out_dir)
        self.trace_name = trace_name
        self.stop_when_done = stop_when_done
        self.listeners = list(listeners)  # told when the recorded steps begin and end (telemetry, attribution)
        self.on_leader = on_leader  # told when a source takes the lead or the capture ends (hooks to drop)
        self.sees_backward = sees_backward  # backward passes are reported (so training can be told apart)
        self.arbiter = StepArbiter(spec.step_on)
        self.cycles: list[Cycle] = [self._cycle(None, 0)]
        self.notes: list[str] = []
        self.batch_size: int | None = None
        self.batch_size_source: str | None = None
        self.finished = False  # the capture is over: marks do nothing more
        self.stop_requested = False
        self._recording = False
        self._window_started = False  # listeners hear between_steps from then on
        self._waited = 0  # leader steps since a provisional window
        self._waited_for: set[str] = set()  # why the profiler waited past --skip: "warming", "short"
        self._ask_again_at = 0  # the step at which the waiting profiler asks the meter again (capture/waiting.py)
        self._lock = threading.RLock()
        self._closed = False
        # Profiler work due after a window stopped (its calibration, the meter told): never in the boundary that
        # stopped it, where ranges it recorded are still open (capture/window.py says why); at the next one.
        self._after_stop: Callable[[bool], None] | None = None  # called with whether the program has ended
        self._calibrating = False
        # The step meter (capture/meter): told when a profiler runs, and of the marks only a session hears
        # (stepscope.step(), the trainer callbacks); it measures every step, before, during and after the window.
        self.meter: Any = None

    @property
    def cycle(self) -> Cycle:
        return self.cycles[-1]

    @property
    def window(self) -> ProfilerWindow | None:
        return self.cycle.window

    def _cycle(self, leader: str | None, index: int) -> Cycle:
        suffix = "" if index == 0 else f"-{index}"  # the reported cycle's files are renamed at the end
        name = self.trace_name if index == 0 else f"trace{suffix}.json.gz"
        return Cycle(self.spec, leader, self.out_dir / name, timing_path=self.out_dir / f"timing{suffix}.json.gz")

    # -- the boundary ----------------------------------------------------------------------------------

    def begin(self) -> None:
        """Before the program's first step: with nothing to skip the profiler starts now."""
        if self.spec.skip == 0:
            self.arbiter.lock()
            self._start_window(0)

    def mark(self, source: str) -> None:
        """A step of `source` has just ended (and the next begins)."""
        if self._calibrating:
            return
        if self.meter is not None and source in MARKED:
            self.meter.boundary(source)
        t_enter = time.perf_counter_ns()
        t_resume = self._run_after_stop(t_enter)
        if self.finished:
            return
        leader = self.arbiter.leader
        if leader is not None and not self._recording and PRIORITY[source] > PRIORITY[leader]:
            return  # a weaker source while nothing records: the arbiter would ignore it (a backward pass a step)
        with self._lock:
            if self._window_started:  # at every hook once a window began (a mode it pushed): see between_steps
                for listener in self.listeners:
                    between = getattr(listener, "between_steps", None)
                    if between is not None:
                        between()
            self.cycle.observe(source, self._recording)
            kind = self.arbiter.mark(source)
            if kind is Mark.IGNORE:
                return
            ended = False
            if kind is Mark.SWITCH:
                self._switch(source)
            elif self.cycle.phase == DONE:  # a provisional window is recorded: wait for a stronger source
                self._wait(source)
                ended = self.finished
            if self.cycle.phase != DONE:
                ended = self._boundary(self.arbiter.completed, t_enter, t_resume)
        if ended and self.stop_requested:
            self._stop_program()

    def _switch(self, source: str) -> None:
        current = self.cycle
        if current.leader is None and current.phase != SKIP:
            current.leader = source  # the window began before any step (skip 0): the first source owns it
        elif current.phase == DONE or current.window is not None:
            self.cycles.append(self._cycle(source, len(self.cycles)))  # keep the provisional window; try again
            self._waited = 0
        else:
            self.cycles[-1] = self._cycle(source, len(self.cycles) - 1)  # nothing recorded yet: start over
        self._ask_again_at = 0  # a new leader's steps are counted from 0
        if self.on_leader:
            self.on_leader(source)

    def _wait(self, source: str) -> None:
        """Steps of the provisional leader: backward passes wait a while for an optimizer step, no longer."""
        self._waited += 1
        if source == "backward" and self._waited >= WAIT_FOR_OPTIMIZER:
            self.notes.append(f"no optimizer step in {WAIT_FOR_OPTIMIZER} backward passes after the window: "
                              "backward passes are the steps")
            self._finish()
            self.stop_requested = self.stop_when_done

    def _run_after_stop(self, t_enter: int, *, ended: bool = False) -> int:
        """Run the work left by a window that stopped at an earlier boundary (or at the end, `ended`); when the next
        step's time starts."""
        if self._after_stop is None:
            return t_enter
        with self._lock:
            work, self._after_stop = self._after_stop, None
            if work is not None:
                work(ended)
        return time.perf_counter_ns()

    def _boundary(self, completed: int, t_enter: int, t_resume: int) -> bool:
        """Move the cycle along; True when the capture has just finished. The step that ended, ended at `t_enter`;
        the next starts at `t_resume` (later when work left by the window ran in between)."""
        c = self.cycle
        c.times.end_step(t_enter, c.step_phase)
        t_next = t_resume
        if c.phase == SKIP:
            if completed == 1 and c.skip_target >= 2:
                t_next = c.times.begin_slice(completed)  # steps 1..skip-1: the reference before the window
            if completed >= c.skip_target and not self._settling(completed):
                c.times.end_slice(completed)
                self.arbiter.lock()
                self._start_window(completed)
                t_next = time.perf_counter_ns()
        elif c.phase == WINDOW:
            t_next = self._window_step(c, completed)
        elif c.phase == REFERENCE:
            after = completed - (c.window_end or 0)
            if after == SETTLE_STEPS:
                t_next = c.times.begin_slice(completed)
            elif after >= SETTLE_STEPS + self.spec.reference_steps:
                c.times.end_slice(completed)
                c.phase = DONE
        c.times.begin_step(t_next)
        return self._cycle_done() if c.phase == DONE else False

    def _settling(self, completed: int) -> bool:
        """Whether the profiler waits one more step (capture/waiting.py); the note says why it waited."""
        if completed < self._ask_again_at:
            return True
        found = why_wait(self.meter, self.cycle.leader, completed, self.spec.skip) if (
            self.meter is not None and self.spec.settle) else None
        if found is not None:
            self._waited_for.add(found[0])
            self._ask_again_at = completed + found[1]
            return True
        note = waited_note(completed, self.spec.skip, self._waited_for)
        if note is not None:
            self.notes.append(note)
        return False

    def _window_step(self, c: Cycle, completed: int) -> int:
        w = c.window
        assert w is not None
        was_recording = w.recording
        if w.boundaries + 1 >= w.length:
            self._tell_ended()  # before the export, which is no part of the window
        if not w.step():
            if w.recording and not was_recording:
                self._tell_started()
            elif w.recorded_pass_starting:
                self._tell_warmup_or_started()
            return time.perf_counter_ns()
        self._window_ended(c, completed)
        return time.perf_counter_ns()

    def _start_window(self, first_step: int, *, deferred: bool = False) -> None:
        c = self.cycle
        c.window = ProfilerWindow(self.spec, first_step, c.trace_path, c.timing_path, deferred=deferred)
        c.phase = WINDOW
        self._window_started = True
        if self.meter is not None:
            self.meter.profiler_started()
        if deferred:
            return  # started by the window's next boundary, which tells the listeners
        try:
            c.window.start()
        except Exception as exc:  # e.g. the program runs its own profiler already
            c.failure = f"could not start the profiler ({type(exc).__name__}: {exc}); nothing was recorded"
            c.notes.append(c.failure)
            c.window = None
            c.phase = DONE
            self._finish()
            return
        if c.window.timing is None:
            self._tell_warmup_or_started()
        # else the timing pass runs with no listener (no attribution survey): they hear when the recorded pass starts

    def _tell_warmup_or_started(self) -> None:
        if self.spec.warmup == 0:
            self._tell_started()
        else:
            for listener in self.listeners:
                getattr(listener, "warmup_started", lambda: None)()

    def _tell_started(self) -> None:
        self._recording = True
        for listener in self.listeners:
            listener.window_started()

    def _tell_ended(self) -> None:
        if self._recording:
            self._recording = False
            for listener in self.listeners:
                listener.window_ended()

    def _window_ended(self, c: Cycle, completed: int) -> None:
        w = c.window
        exported = w.exported if w else None
        if exported is not None:
            c.notes.extend(exported.notes)
        if (exported is None or exported.path is None) and self.spec.with_stack:
            # The with_stack export bug: record the window again without stacks rather than lose the run.
            why = exported.error if exported else "no trace"
            c.notes.append(f"the trace with Python stacks could not be written ({why}); recorded again without")
            self.spec = c.spec = replace(self.spec, with_stack=False)
            self._start_window(completed + 1, deferred=True)
            return
        calibrate = False
        if exported is None or exported.path is None:
            c.failure = f"the profiler wrote no trace ({exported.error if exported else 'no export'})"
            c.notes.append(c.failure)
        else:
            calibrate = self.spec.calibrate
        c.window_end = completed
        c.phase = REFERENCE if self.spec.reference_steps > 0 else DONE
        if self.meter is not None:
            self.meter.profiler_stopped()  # after the export
        # The step after the window settles (SETTLE_STEPS >= 1): its boundary calibrates, before the reference.
        if calibrate:
            self._after_stop = lambda ended: self._after_window(c, ended)

    def _after_window(self, c: Cycle, ended: bool) -> None:
        """The calibration: at a boundary, a profiler span of its own for the meter (the step it falls in is no plain
        step); at the program's end there is no step left to spoil."""
        meter = self.meter if not ended else None
        if meter is not None:
            meter.profiler_started()
        self._calibrate(c)
        if meter is not None:
            meter.profiler_stopped()

    def _calibrate(self, c: Cycle) -> None:
        assert c.window is not None
        self._calibrating = True  # its loops' backward passes reach the step hooks: they are no steps
        try:
            c.calibration, note = calibrate_window(c.window)
        finally:
            self._calibrating = False
        if note:
            c.notes.append(note)

    def _cycle_done(self) -> bool:
        """The cycle's window and reference are done: finish, or wait for a stronger source."""
        c = self.cycle
        # Model forwards or batches may be an evaluation before training, backward passes one micro-batch of
        # gradient accumulation: keep the window, but let a training source that shows up later replace it.
        provisional = not self.arbiter.final() and c.recorded > 0 and (c.leader == "backward" or self.sees_backward)
        if provisional:
            self.arbiter.reopen()
            self._waited = 0
            return False
        self._finish()
        self.stop_requested = self.stop_when_done
        return True

    def _finish(self) -> None:
        self.finished = True
        if self.on_leader:
            self.on_leader("")  # no source is needed any more: drop every hook

    def _stop_program(self) -> None:
        if threading.current_thread() is threading.main_thread():
            raise StopProgram
        _thread.interrupt_main()  # a step marked on another thread: end the main one instead

    # -- inputs besides the boundary ------------------------------------------------------------------

    def set_batch_size(self, size: int | None, source: str) -> None:
        """Samples per step, from `source` (one of BATCH_SIZE_SOURCES); a stronger source replaces a weaker."""
        self.batch_size, self.batch_size_source = stronger_batch_size(
            (self.batch_size, self.batch_size_source), size, source)

    # -- the end ---------------------------------------------------------------------------------------

    def close(self) -> CaptureResult:
        """The program has ended (or failed): stop a window still running and say what was captured."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._run_after_stop(0, ended=True)  # the program's frames have unwound: no range of the window is open
                w = self.cycle.window
                if w is not None and (w.running or w.waiting):
                    self._tell_ended()
                    w.stop()
                    if w.exported is not None:
                        self.cycle.notes.extend(w.exported.notes)
                        if w.exported.path is not None and self.spec.calibrate:
                            self._calibrate(self.cycle)  # the steps recorded are the timeline: replay them too
                    self._finish()
                if self.meter is not None:
                    self.meter.profiler_stopped()
                self.finished = True
                for listener in self.listeners:  # global hooks a listener holds go with the session
                    getattr(listener, "session_closed", lambda: None)()
            return capture_result(self)


# -- the session `stepscope.step()` reports to ------------------------------------------------------------

_active: CaptureSession | None = None


def activate(session: CaptureSession | None) -> CaptureSession | None:
    """Make `session` the one `stepscope.step()` marks; returns the previous one."""
    global _active
    previous, _active = _active, session
    return previous


def active() -> CaptureSession | None:
    return _active
