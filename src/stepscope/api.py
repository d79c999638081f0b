"""The Python API: profile a window of steps from inside a program and get the same Report as the CLI.

    import stepscope
    with stepscope.profile(batch_size=32) as p:
        for batch in loader:
            train_step(batch)
            p.step()
    print(p.report.patterns)

`stepscope.step()` marks a step in whichever capture is active (this API's, or `stepscope run`'s) and
does nothing when none is, so a program can keep the call and still run under plain `python`.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import msgspec

from stepscope.capture.session import TRACE_NAME, CaptureResult, CaptureSession, activate, active
from stepscope.capture.signals import EXIT_CODE as SIGTERM_EXIT_CODE
from stepscope.capture.signals import SigtermHandler
from stepscope.capture.telemetry import Telemetry, TelemetryReport
from stepscope.capture.window import WindowSpec
from stepscope.errors import StepscopeError
from stepscope.model import report as s

if TYPE_CHECKING:
    from stepscope.predict import PredictRequest


def step() -> None:
    """Mark the end of a step in the active capture (no-op when nothing is being captured)."""
    session = active()
    if session is not None:
        session.mark("manual")


class Profile:
    """A capture driven by explicit `step()` calls; use `stepscope.profile(...)` to make one."""

    def __init__(
        self,
        *,
        skip: int = 5,
        warmup: int = 2,
        steps: int = 5,
        batch_size: int | None = None,
        out: str | Path | None = None,
        record_shapes: bool = False,
        profile_memory: bool | None = None,
        with_stack: bool = False,
        telemetry: bool = False,
        attribution: bool = True,
        source: str = "manual",
    ) -> None:
        self.spec = WindowSpec(skip=skip, warmup=warmup, steps=steps, record_shapes=record_shapes,
                               profile_memory=profile_memory, with_stack=with_stack)
        self.source = source
        self._batch_size = batch_size
        self._out = Path(out) if out is not None else None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._want_telemetry = telemetry
        self._want_attribution = attribution
        self._telemetry: Telemetry | None = None
        self._session: CaptureSession | None = None
        self._previous: CaptureSession | None = None
        self._sigterm: SigtermHandler | None = None
        self.result: CaptureResult | None = None
        self.telemetry: TelemetryReport | None = None
        self._report: s.Report | None = None

    def __enter__(self) -> Profile:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        if self._out is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="stepscope-")
            folder = Path(self._tmp.name)
        else:
            folder = self._out
            if (folder / TRACE_NAME).exists():
                raise StepscopeError(f"{folder / TRACE_NAME}: already exists",
                                     hint="give out= a new folder, or leave it out for a temporary one")
            folder.mkdir(parents=True, exist_ok=True)
        if self._want_telemetry:
            self._telemetry = Telemetry().start()
        listeners: list = [self._telemetry] if self._telemetry is not None else []
        if self._want_attribution:
            from stepscope.capture.attribution import AttributionWindow

            listeners.append(AttributionWindow())
        from stepscope.capture.census import MemoryCensus

        listeners.append(MemoryCensus(folder))  # what the model and optimizer hold: the memory categories
        self._session = CaptureSession(self.spec, folder, listeners=listeners)
        self._session.set_batch_size(self._batch_size, "user")
        self._previous = activate(self._session)
        # SIGTERM ends the program as it would have, but through its `with` blocks and its exit handlers (which
        # stop a capture nobody stopped, as a trainer callback without an exception hook leaves it): the window
        # is kept.
        self._sigterm = SigtermHandler(exit_code=SIGTERM_EXIT_CODE).__enter__()
        atexit.register(self._stop_at_exit)
        self._session.begin()

    def step(self) -> None:
        """The step that just ran is over (call it once per training or inference step)."""
        if self._session is not None:
            self._session.mark(self.source)

    def set_batch_size(self, size: int, source: str = "trainer") -> None:
        if self._session is not None:
            self._session.set_batch_size(size, source)

    def stop(self) -> CaptureResult:
        """Stop capturing (a window still running keeps what it recorded); safe to call twice."""
        if self.result is None:
            if self._session is None:
                raise StepscopeError("this profile was never started")
            if active() is self._session:
                activate(self._previous)
            if self._sigterm is not None:
                self._sigterm.uninstall()
            atexit.unregister(self._stop_at_exit)
            self.result = self._session.close()
            if self._telemetry is not None:
                self.telemetry = self._telemetry.stop()
        return self.result

    def _stop_at_exit(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit there is no one left to tell
            self.stop()

    @property
    def done(self) -> bool:
        """The window is recorded (or cannot be): further steps cost nothing."""
        return self._session is not None and self._session.finished

    @property
    def trace_path(self) -> Path | None:
        return self.result.trace_path if self.result else None

    @property
    def report(self) -> s.Report:
        """The diagnosis of the recorded window (analysed on first use)."""
        if self._report is None:
            result = self.stop()
            self._report = live_report(result, self.spec, command=[], exit_code=None, telemetry=self.telemetry)
        return self._report


def profile(**options: object) -> Profile:
    """`with stepscope.profile(skip=5, warmup=2, steps=5, batch_size=None, ...) as p:`, `p.step()` per step.

    Options: out (a folder for the trace), record_shapes, profile_memory, with_stack, telemetry (CPU/GPU
    readings, off by default), attribution (time by source line and module in the recorded steps, on)."""
    return Profile(**options)  # type: ignore[arg-type]


def capture_status(result: CaptureResult, program_status: str = "finished") -> str:
    if program_status == "exception" or program_status == "exit":
        return "failed"
    if program_status == "interrupted":
        return "interrupted"
    if program_status == "terminated":
        return "terminated"
    if result.trace_path is None or result.steps_recorded == 0:
        return "nothing recorded"
    return "window recorded" if result.window_complete else "ended early"


def live_report(
    result: CaptureResult,
    spec: WindowSpec,
    *,
    command: list[str],
    exit_code: int | None,
    program_status: str = "finished",
    telemetry: TelemetryReport | None = None,
    folder: Path | None = None,
    files: list[str] | None = None,
    predict: PredictRequest | None = None,
) -> s.Report:
    """Analyse the captured trace with the one pipeline, and add how the capture went (and, with `predict`,
    the job on other GPUs)."""
    from stepscope.pipeline import analyze_traces
    from stepscope.trace.kineto import read_kineto

    if result.trace_path is None:
        raise StepscopeError(nothing_recorded(result, spec),
                             hint="mark steps with stepscope.step(), or lower the skip and warm-up")
    power = None
    if predict is not None and telemetry is not None and telemetry.window is not None:
        from stepscope.predict.energy import window_power

        power = window_power(msgspec.to_builtins(telemetry.window))
    report = analyze_traces([read_kineto(result.trace_path)], batch_size=result.batch_size, predict=predict,
                            power_w=power)
    report.run = run_section(result, spec, command=command, exit_code=exit_code, program_status=program_status,
                             telemetry=telemetry, folder=folder, files=files)
    report.notes.extend(result.notes)
    if result.overhead is not None:
        o = result.overhead
        report.notes.append(
            f"profiler overhead {o.ratio:+.1%}: recorded steps took {o.recorded_step_ns / 1e6:.2f} ms, unprofiled "
            f"ones {o.unprofiled_step_ns / 1e6:.2f} ms (medians of {o.recorded_steps} and {o.reference_steps} "
            "steps, host clock)")
    return report


def run_section(result: CaptureResult, spec: WindowSpec, *, command: list[str], exit_code: int | None,
                program_status: str = "finished", telemetry: TelemetryReport | None = None,
                folder: Path | None = None, files: list[str] | None = None) -> s.Run:
    o = result.overhead
    window = telemetry.window if telemetry is not None else None
    return s.Run(
        command=list(command),
        status=capture_status(result, program_status),
        exit_code=exit_code,
        step_source=result.step_source,
        skip=spec.skip,
        warmup=spec.warmup,
        steps_requested=spec.steps,
        steps_recorded=result.steps_recorded,
        first_recorded_step=result.first_recorded_step,
        batch_size=result.batch_size,
        batch_size_source=result.batch_size_source,
        profiled_device="cuda" if result.gpu else "cpu",
        profiler_overhead=round(o.ratio, 4) if o else None,
        unprofiled_step_us=round(o.unprofiled_step_ns / 1e3, 3) if o else None,
        recorded_step_us=round(o.recorded_step_ns / 1e3, 3) if o else None,
        telemetry=msgspec.to_builtins(window) if window is not None else None,
        folder=str(folder) if folder is not None else None,
        files=list(files or []),
    )


def nothing_recorded(result: CaptureResult, spec: WindowSpec) -> str:
    """Why there is no trace, in one line."""
    if result.notes:
        return result.notes[-1]
    if result.step_source is None:
        return ("no steps were detected (no optimizer step, DataLoader iteration or model forward, "
                "and no stepscope.step() call)")
    needed = spec.skip + spec.warmup + 1
    return (f"the program ran {result.steps_completed} steps ({result.step_source}); recording starts after "
            f"{spec.skip} skipped and {spec.warmup} warm-up steps, so it needs at least {needed}")


TEXT_WIDTH = 110  # report.txt is read in editors and diffs, not a terminal


def text_report(report: s.Report, extra_lines: list[str] | None = None, width: int = TEXT_WIDTH) -> str:
    """The terminal report as plain text."""
    import io

    from rich.console import Console

    from stepscope.report.terminal import render_terminal

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False, highlight=False)
    render_terminal(report, console)
    for line in extra_lines or []:
        console.print(line, markup=False)
    return buffer.getvalue()


def write_report_files(report: s.Report, folder: Path, extra_lines: list[str] | None = None,
                       telemetry: dict[str, Any] | None = None) -> list[str]:
    """report.json, report.txt and report.html beside the trace, each written whole or not at all; returns the
    names written. A file that cannot be written is said on stderr and the others are still tried."""
    from stepscope.atomic import write_atomic
    from stepscope.report import render

    pages = {"report.json": lambda: render("json", report), "report.txt": lambda: text_report(report, extra_lines),
             "report.html": lambda: render("html", report, telemetry=telemetry)}
    written = []
    for name, make in pages.items():
        try:
            write_atomic(folder / name, make(), what="report", hint=WRITE_HINT)
            written.append(name)
        except StepscopeError as exc:
            print(f"stepscope: {exc.message}" + (f"\n  hint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        except Exception as exc:  # the page is a convenience: never let it cost the run its other files
            print(f"stepscope: {name} was not written ({type(exc).__name__}: {exc})", file=sys.stderr)
    return written


WRITE_HINT = "give a folder you can write to, on a disk with room (stepscope run --out DIR, or out= in the API)"
