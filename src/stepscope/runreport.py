"""The Report of a live capture (`stepscope run`, the Python API, the trainer callbacks): the one pipeline's
report of the recorded trace, told how the capture went (the run section: the unprofiled reference the
profiler's overhead is corrected against, the program's settings), and the files of its run folder."""

from __future__ import annotations

import dataclasses
import io
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec
from rich.console import Console

from stepscope.atomic import write_atomic
from stepscope.capture.options import CaptureOptions
from stepscope.capture.session import CaptureResult
from stepscope.errors import StepscopeError
from stepscope.model import report as s
from stepscope.model import runfolder
from stepscope.model.meter import MeterRecord
from stepscope.model.telemetry import TelemetryReport
from stepscope.pipeline import AnalyzeOptions, analyze
from stepscope.predict import PredictRequest
from stepscope.predict.energy import window_power
from stepscope.report import render
from stepscope.report.terminal import make_console, render_terminal
from stepscope.trace.kineto import read_kineto
from stepscope.units import report_us

TEXT_WIDTH = 110  # report.txt is read in editors and diffs, not a terminal


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
    spec: CaptureOptions,
    *,
    command: list[str],
    exit_code: int | None,
    program_status: str = "finished",
    telemetry: TelemetryReport | None = None,
    folder: Path | None = None,
    files: list[str] | None = None,
    predict: PredictRequest | None = None,
    meter: MeterRecord | None = None,
    settled: Callable[[s.Recommendation], str | None] | None = None,
) -> s.Report:
    """Analyse the captured trace with the one pipeline, told how the capture went (and, with `predict`, the
    job on other GPUs)."""
    if result.trace_path is None:
        raise StepscopeError(nothing_recorded(result, spec),
                             hint="mark steps with stepscope.step(), or lower the skip and warm-up")
    run = run_section(result, spec, command=command, exit_code=exit_code, program_status=program_status,
                      telemetry=telemetry, folder=folder, files=files)
    power = None
    if predict is not None and telemetry is not None and telemetry.window is not None:
        power = window_power(telemetry.window)
    options = AnalyzeOptions(batch_size=result.samples_per_step, run=run, capture_notes=tuple(result.notes),
                             predict=predict, power_w=power, meter=meter, settled=settled)
    return analyze(read_kineto(result.trace_path), options)


def run_section(result: CaptureResult, spec: CaptureOptions, *, command: list[str], exit_code: int | None,
                program_status: str = "finished", telemetry: TelemetryReport | None = None,
                folder: Path | None = None, files: list[str] | None = None) -> s.Run:
    """How the capture went; the profiler's overhead is filled in by the analysis, which sees the trace."""
    window = telemetry.window if telemetry is not None else None
    ref = result.reference
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
        profiler_overhead=None,
        unprofiled_step_us=report_us(ref.step_ns) if ref else None,
        recorded_step_us=None,
        telemetry=window,
        folder=str(folder) if folder is not None else None,
        files=list(files or []),
        step_on=result.step_on,
        phase=result.phase,
        grad_accumulation=result.accumulation,
        samples_per_step=result.samples_per_step if result.accumulation else None,
        reference=s.Reference(method=ref.method, step_us=report_us(ref.step_ns),
                              values_us=[report_us(v) for v in ref.values_ns], steps=ref.steps,
                              noise=round(ref.noise, 4)) if ref else None,
        settings=msgspec.convert(dataclasses.asdict(result.settings), s.Settings) if result.settings else None,
    )


def nothing_recorded(result: CaptureResult, spec: CaptureOptions) -> str:
    """Why there is no trace, in one line."""
    # The profiler's own failure says why, before later notes (a census the full disk also refused).
    if result.failure or result.notes:
        return result.failure or result.notes[-1]
    if result.step_source is None:
        return ("no steps were detected (no optimizer step, backward pass, DataLoader iteration or model forward, "
                "and no stepscope.step() call)")
    needed = spec.skip + spec.warmup + 1
    if spec.settle and result.steps_completed > spec.skip:
        return (f"the program ran {result.steps_completed} steps ({result.step_source}) and ended while the profiler "
                f"waited for steady steps after the {spec.skip} skipped (they were still getting faster); "
                f"--skip {spec.skip} starts it after exactly {spec.skip}")
    return (f"the program ran {result.steps_completed} steps ({result.step_source}); recording starts after "
            f"{spec.skip} skipped and {spec.warmup} warm-up steps, so it needs at least {needed}")


def print_report(report: s.Report, last_line: str) -> None:
    """The terminal report on stdout, on a line of its own (not after a trainer's progress bar), then
    `last_line`."""
    console = make_console()
    console.print()
    console.print(render("terminal", report))
    console.print(last_line, highlight=False, markup=False)


def text_report(report: s.Report, extra_lines: list[str] | None = None, width: int = TEXT_WIDTH) -> str:
    """The terminal report as plain text."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False, highlight=False)
    render_terminal(report, console)
    for line in extra_lines or []:
        console.print(line, markup=False)
    return buffer.getvalue()


def write_report_files(report: s.Report, folder: Path, extra_lines: list[str] | None = None,
                       telemetry: TelemetryReport | None = None, names: tuple[str, ...] | None = None) -> list[str]:
    """report.html, report.txt and report.json beside the trace (or those of them `names` lists), each written
    whole or not at all; returns the names written. A file that cannot be written is said on stderr, the others are
    still tried, and the run's list of files (run.files) in each one written names only the files that were: the
    page, the largest and the one a full disk refuses first, is written first, and a file written before a later
    one failed is written again without it."""
    pages = {runfolder.REPORT_HTML: lambda r: render("html", r, telemetry=telemetry),
             runfolder.REPORT_TEXT: lambda r: text_report(r, extra_lines),
             runfolder.REPORT_JSON: lambda r: render("json", r)}
    if names is not None:
        pages = {name: make for name, make in pages.items() if name in names}
    failed: set[str] = set()
    claimed: dict[str, frozenset[str]] = {}  # name written -> the failures known when it was rendered
    for name, make in pages.items():
        if _write_page(folder / name, make, _without(report, failed)):
            claimed[name] = frozenset(failed)
        else:
            failed.add(name)
    for name, known in claimed.items():
        if known != failed:  # it lists a file that then failed: once more, best effort (the first copy stays)
            _write_page(folder / name, pages[name], _without(report, failed))
    return [name for name in pages if name in claimed]


def _without(report: s.Report, failed: set[str]) -> s.Report:
    """The report whose run.files leaves out the files that could not be written."""
    if report.run is None or not failed:
        return report
    files = [f for f in report.run.files if f not in failed]
    return msgspec.structs.replace(report, run=msgspec.structs.replace(report.run, files=files))


def _write_page(path: Path, make: Callable[[s.Report], bytes | str], report: s.Report) -> bool:
    try:
        write_atomic(path, make(report), what="report", hint=WRITE_HINT)
        return True
    except StepscopeError as exc:
        print(f"stepscope: {exc.message}" + (f"\n  hint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
    except Exception as exc:  # the page is a convenience: never let it cost the run its other files
        print(f"stepscope: {path.name} was not written ({type(exc).__name__}: {exc})", file=sys.stderr)
    return False


WRITE_HINT = "give a folder you can write to, on a disk with room (stepscope run --out DIR, or out= in the API)"
