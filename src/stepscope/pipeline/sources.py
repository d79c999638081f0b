"""What `analyze` is pointed at, made into traces or trace files and the options a run folder adds.

A source is a path (a trace file, a folder of per-rank traces, a `stepscope run` folder, a quoted glob, a list
file), several paths (the ranks of one job), a Trace read already, or several. A run folder also holds what the
capture measured: its samples per step, its unprofiled step timings (the run's reference) and the profiler's
cost per event (calibration.json), which the replay takes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from stepscope.model import runfile, runfolder
from stepscope.model.calibration import ProfilerCost, calibration_problem
from stepscope.model.meter import MeterRecord, meter_problem
from stepscope.model.report import SCHEMA, Report, Run
from stepscope.model.run import run_problem
from stepscope.pipeline.options import AnalyzeOptions
from stepscope.ranks.inputs import rank_files
from stepscope.trace.model import Trace

Source = str | Path | Iterable[str | Path] | Trace | Sequence[Trace]
T = TypeVar("T")
REPORT_BYTES = 512 << 20  # a report of a long trace's many lines and steps is larger than a side file


def traces_given(source: Source) -> list[Trace] | None:
    """The traces, when the source is traces read already (None when it is paths)."""
    if isinstance(source, Trace):
        return [source]
    if isinstance(source, Sequence) and not isinstance(source, str) and source and \
            all(isinstance(t, Trace) for t in source):
        return list(source)  # type: ignore[arg-type]
    return None


def paths_given(source: Source) -> list[str | Path]:
    return [source] if isinstance(source, (str, Path)) else list(source)  # type: ignore[arg-type]


def files_of(paths: list[str | Path]) -> list[Path]:
    """Every trace file the paths name (rank folders, globs and list files expanded)."""
    return rank_files(paths)


def with_run_folder(paths: list[str | Path], options: AnalyzeOptions) -> AnalyzeOptions:
    """The options, completed from the run folder when the one path given is one: its samples per step (unless
    given), its reference and its calibration (for the replay); each of its files that cannot be used is said in
    the report's notes."""
    folder = Path(paths[0]) if len(paths) == 1 else None
    if folder is None or not runfolder.is_run_folder(folder):
        return options
    notes: list[str] = []
    run = _run_section(folder, notes)
    batch = options.batch_size or ((run.samples_per_step or run.batch_size) if run is not None else None)
    return options.replace(
        batch_size=batch,
        reference=options.reference or (run.reference if run is not None else None),
        calibration=options.calibration or calibration_in(folder, notes),
        timing=options.timing or timing_in(folder, notes),
        meter=options.meter or meter_in(folder, notes),
        folder_run=options.folder_run or run,
        capture_notes=(*options.capture_notes, *notes),
    )


def with_live_run(options: AnalyzeOptions) -> AnalyzeOptions:
    """The options, completed from a live capture's run section: its reference, and the calibration in its run
    folder (for the replay)."""
    run = options.run
    if run is None:
        return options
    folder = Path(run.folder) if run.folder else None
    return options.replace(reference=options.reference or run.reference,
                           calibration=options.calibration or calibration_in(folder),
                           timing=options.timing or timing_in(folder))


def timing_in(folder: Path | None, notes: list[str] | None = None) -> Path | None:
    """The timing pass's trace in a run folder, when the capture made one and it is a regular file (else said in
    `notes`)."""
    path = folder / runfolder.TIMING if folder is not None else None
    if path is None or not os.path.lexists(path):
        return None
    if path.is_file():
        return path
    if notes is not None:
        notes.append(runfile.RunFileError(path, "not a regular file (a FIFO, a device or a link to one): not read")
                     .note)
    return None


def _run_section(folder: Path, notes: list[str]) -> Run | None:
    """The run section of the folder's report.json; None when there is none or it cannot be used (the trace is
    still analysed; only what the run measured is missing, and a note says so)."""
    try:
        report = runfile.load(folder / runfolder.REPORT_JSON, Report, _report_problem, limit=REPORT_BYTES)
    except runfile.RunFileError as exc:
        notes.append(exc.note)
        return None
    return report.run if report is not None else None


def _report_problem(report: Report) -> str | None:
    if report.schema != SCHEMA:
        return f"unsupported schema {report.schema!r} (expected {SCHEMA})"
    return run_problem(report.run) if report.run is not None else None


def meter_in(folder: Path | None, notes: list[str] | None = None) -> MeterRecord | None:
    """The step meter's record of the run (meter.json), None when there is none or it cannot be used (said in
    `notes`)."""
    return _side_file(folder, runfolder.METER, MeterRecord, meter_problem, notes)


def calibration_in(folder: Path | None, notes: list[str] | None = None) -> ProfilerCost | None:
    """The profiler's cost per event the capture measured (calibration.json), None when it did not or the file
    cannot be used (said in `notes`)."""
    return _side_file(folder, runfolder.CALIBRATION, ProfilerCost, calibration_problem, notes)


def _side_file(folder: Path | None, name: str, kind: type[T], check: Callable[[T], str | None],
               notes: list[str] | None) -> T | None:
    if folder is None:
        return None
    try:
        return runfile.load(folder / name, kind, check)
    except runfile.RunFileError as exc:
        if notes is not None:
            notes.append(exc.note)
        return None
