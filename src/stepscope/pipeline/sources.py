"""What `analyze` is pointed at, made into traces or trace files and the options a run folder adds.

A source is a path (a trace file, a folder of per-rank traces, a `stepscope run` folder, a quoted glob, a list
file), several paths (the ranks of one job), a Trace read already, or several. A run folder also holds what the
capture measured: its samples per step, its unprofiled step timings (the run's reference) and the profiler's
cost per event (calibration.json), which the replay takes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec

from stepscope.model import runfolder
from stepscope.model.calibration import ProfilerCost
from stepscope.model.meter import MeterRecord, meter_from_json
from stepscope.model.report import Run, from_json
from stepscope.pipeline.options import AnalyzeOptions
from stepscope.ranks.inputs import rank_files
from stepscope.trace.model import Trace

Source = str | Path | Iterable[str | Path] | Trace | Sequence[Trace]


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
    given), its reference and its calibration (for the replay)."""
    folder = Path(paths[0]) if len(paths) == 1 else None
    if folder is None or not folder.is_dir() or not (folder / runfolder.TRACE).is_file():
        return options
    run = _run_section(folder)
    batch = options.batch_size or ((run.samples_per_step or run.batch_size) if run is not None else None)
    return options.replace(
        batch_size=batch,
        reference=options.reference or (run.reference if run is not None else None),
        calibration=options.calibration or calibration_in(folder),
        timing=options.timing or timing_in(folder),
        meter=options.meter or meter_in(folder),
        folder_run=options.folder_run or run,
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


def timing_in(folder: Path | None) -> Path | None:
    """The timing pass's trace in a run folder, when the capture made one."""
    path = folder / runfolder.TIMING if folder is not None else None
    return path if path is not None and path.is_file() else None


def _run_section(folder: Path) -> Run | None:
    """The run section of the folder's report.json; None when there is none or it cannot be read (the trace is
    still analysed; only what the run measured is missing)."""
    path = folder / runfolder.REPORT_JSON
    if not path.is_file():
        return None
    try:
        return from_json(path.read_bytes()).run
    except (OSError, msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        return None


def meter_in(folder: Path | None) -> MeterRecord | None:
    """The step meter's record of the run (meter.json), None when there is none or it cannot be read."""
    path = folder / runfolder.METER if folder is not None else None
    if path is None or not path.is_file():
        return None
    try:
        return meter_from_json(path.read_bytes())
    except (OSError, msgspec.DecodeError, msgspec.ValidationError, ValueError):
        return None


def calibration_in(folder: Path | None) -> ProfilerCost | None:
    """The profiler's cost per event the capture measured (calibration.json), None when it did not."""
    path = folder / runfolder.CALIBRATION if folder is not None else None
    if path is None or not path.is_file():
        return None
    try:
        return ProfilerCost.from_dict(json.loads(path.read_bytes()))
    except (OSError, ValueError, TypeError, KeyError):
        return None
