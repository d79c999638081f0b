"""A capture session: step boundaries in, one profiled window out, with the step times around it.

Everything that captures (the `run` verb's hooks, the Python API, the trainer callbacks) reports step
boundaries here with `mark(source)`; the session picks the leading source, starts the profiler after
the skipped steps, advances it, writes the trace when the window is complete, and times every step so
the profiler's own overhead can be told from the program's.
"""

from __future__ import annotations

import _thread
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from stepscope.capture.arbiter import Mark, StepArbiter
from stepscope.capture.overhead import Overhead, StepTimes
from stepscope.capture.window import ProfilerWindow, WindowSpec

TRACE_NAME = "trace.json.gz"
# Where a batch size came from, strongest first: the user's word, what the loader yields, the model's input.
BATCH_SIZE_SOURCES = ("user", "trainer", "dataloader", "model input")


class StopProgram(BaseException):  # like SystemExit: not an error, and not caught by `except Exception`
    """Raised from a step hook once the window is recorded, to end the profiled program early."""


class WindowListener(Protocol):
    def window_started(self) -> None: ...
    def window_ended(self) -> None: ...


@dataclass
class CaptureResult:
    trace_path: Path | None
    step_source: str | None
    steps_completed: int  # by the leading source
    first_recorded_step: int | None
    steps_recorded: int
    window_complete: bool
    batch_size: int | None
    batch_size_source: str | None
    gpu: bool | None  # None: the profiler never started
    overhead: Overhead | None
    notes: list[str] = field(default_factory=list)


class CaptureSession:
    def __init__(
        self,
        spec: WindowSpec,
        out_dir: Path,
        *,
        stop_when_done: bool = False,
        listeners: Sequence[WindowListener] = (),
        on_leader: Callable[[str], None] | None = None,
        trace_name: str = TRACE_NAME,
    ) -> None:
        self.spec = spec
        self.out_dir = Path(out_dir)
        self.trace_name = trace_name
        self.stop_when_done = stop_when_done
        self.listeners = list(listeners)  # told when the recorded steps begin and end (telemetry, attribution)
        self._recording = False
        self.on_leader = on_leader  # told when a source takes the lead or the window ends (hooks to drop)
        self.arbiter = StepArbiter()
        self.times = StepTimes()
        self.notes: list[str] = []
        self.batch_size: int | None = None
        self.batch_size_source: str | None = None
        self.window: ProfilerWindow | None = None
        self.finished = False  # the window was recorded (or cannot be): marks do nothing more
        self.stop_requested = False
        self._skip_target = spec.skip
        self._lock = threading.RLock()
        self._closed = False

    # -- the boundary ----------------------------------------------------------------------------------

    def begin(self) -> None:
        """Before the program's first step: with nothing to skip the profiler starts now."""
        if self._skip_target == 0:
            self.arbiter.lock()
            self._start_window(0)

    def mark(self, source: str) -> None:
        """A step of `source` has just ended (and the next begins)."""
        if self.finished:
            return
        t_enter = time.perf_counter_ns()
        with self._lock:
            kind = self.arbiter.mark(source)
            if kind is Mark.IGNORE:
                return
            if kind is Mark.SWITCH:
                self.times.restart()
                if self.on_leader:
                    self.on_leader(source)
            completed = self.arbiter.completed
            self.times.end_step(t_enter, self._phase())
            ended = self._advance(completed)
            self.times.begin_step(time.perf_counter_ns() if ended else t_enter)
        if ended and self.stop_requested:
            self._stop_program()

    def _phase(self) -> str:
        w = self.window
        if w is None or not w.running:
            return "unprofiled"
        return "recorded" if w.recording else "warmup"

    def _advance(self, completed: int) -> bool:
        """Move the window along; True when it has just ended."""
        w = self.window
        if w is None or not w.running:
            if completed >= self._skip_target:
                self.arbiter.lock()
                self._start_window(completed)
            return False
        was_recording = w.recording
        if w.boundaries + 1 >= w.length:
            self._tell_ended()  # before the export, which is no part of the window
        if not w.step():
            if w.recording and not was_recording:
                self._tell_started()
            return False
        return self._window_ended(completed)

    def _start_window(self, first_step: int) -> None:
        self.window = ProfilerWindow(self.spec, first_step, self.out_dir / self.trace_name)
        try:
            self.window.start()
        except Exception as exc:  # e.g. the program runs its own profiler already
            self.notes.append(f"could not start the profiler ({type(exc).__name__}: {exc}); nothing was recorded")
            self.window = None
            self._finish()
            return
        if self.spec.warmup == 0:
            self._tell_started()

    def _tell_started(self) -> None:
        self._recording = True
        for listener in self.listeners:
            listener.window_started()

    def _tell_ended(self) -> None:
        if self._recording:
            self._recording = False
            for listener in self.listeners:
                listener.window_ended()

    def _window_ended(self, completed: int) -> bool:
        exported = self.window.exported if self.window else None
        if exported is not None:
            self.notes.extend(exported.notes)
        if (exported is None or exported.path is None) and self.spec.with_stack:
            # The with_stack export bug: record the window again without stacks rather than lose the run.
            why = exported.error if exported else "no trace"
            self.notes.append(f"the trace with Python stacks could not be written ({why}); recorded again without")
            self.spec = WindowSpec(**{**self.spec.__dict__, "with_stack": False})
            self._skip_target = completed
            self._start_window(completed)
            return False
        if exported is None or exported.path is None:
            self.notes.append(f"the profiler wrote no trace ({exported.error if exported else 'no export'})")
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
        if not size:
            return
        current = self.batch_size_source
        if current is None or BATCH_SIZE_SOURCES.index(source) < BATCH_SIZE_SOURCES.index(current):
            self.batch_size, self.batch_size_source = int(size), source

    # -- the end ---------------------------------------------------------------------------------------

    def close(self) -> CaptureResult:
        """The program has ended (or failed): stop a window still running and say what was captured."""
        with self._lock:
            if not self._closed:
                self._closed = True
                w = self.window
                if w is not None and w.running:
                    self._tell_ended()
                    w.stop()
                    if w.exported is not None:
                        self.notes.extend(w.exported.notes)
                    self._finish()
            return self._result()

    def _result(self) -> CaptureResult:
        w = self.window
        path = w.exported.path if w is not None and w.exported is not None else None
        recorded = w.recorded if w is not None else 0
        return CaptureResult(
            trace_path=path,
            step_source=self.arbiter.leader,
            steps_completed=self.arbiter.completed,
            first_recorded_step=(w.first_step + self.spec.warmup) if w is not None and recorded else None,
            steps_recorded=recorded,
            window_complete=recorded == self.spec.steps and path is not None,
            batch_size=self.batch_size,
            batch_size_source=self.batch_size_source,
            gpu=w.gpu if w is not None else None,
            overhead=self.times.overhead(),
            notes=[*self.notes, *(n for listener in self.listeners for n in getattr(listener, "notes", ()))],
        )


# -- the session `stepscope.step()` reports to ------------------------------------------------------------

_active: CaptureSession | None = None


def activate(session: CaptureSession | None) -> CaptureSession | None:
    """Make `session` the one `stepscope.step()` marks; returns the previous one."""
    global _active
    previous, _active = _active, session
    return previous


def active() -> CaptureSession | None:
    return _active
