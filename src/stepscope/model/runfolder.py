"""The run folder's file names, the one place they are spelled: what `stepscope run`, the API and the callbacks
write into `stepscope-runs/NAME-TIME/`, and what `analyze`, `report`, `predict` and `tune` read back. Imports
nothing of ours, so that capture, inside the user's program, can name them without loading anything."""

import os
from pathlib import Path

TRACE = "trace.json.gz"  # the recorded window (Kineto JSON)
REPORT_JSON = "report.json"  # stepscope.report/1
REPORT_TEXT = "report.txt"  # the terminal report as plain text
REPORT_HTML = "report.html"
TELEMETRY = "telemetry.json"  # stepscope.telemetry/1: CPU and GPU readings over the run
CENSUS = "census.json"  # what the model and optimizer hold, for the memory categories
CALIBRATION = "calibration.json"  # the profiler's cost per event on the capturing machine (capture/calibrate.py)
TIMING = "timing.json.gz"  # the timing pass: the steps recorded with minimal settings (capture/window.py)
METER = "meter.json"  # stepscope.meter/1: every step measured unprofiled, its phases (capture/meter/)

# What a run writes, for `--force` to replace them all and nothing else.
RUN_FILES = (TRACE, REPORT_JSON, REPORT_TEXT, REPORT_HTML, TELEMETRY, CENSUS, CALIBRATION, TIMING, METER)


def is_run_folder(path: Path) -> bool:
    """A `stepscope run` folder: its trace and at least one other file only a run writes (report.json or not: a
    run cut short has no report, and its timing trace is not a second rank)."""
    return path.is_dir() and os.path.lexists(path / TRACE) and any(
        os.path.lexists(path / name) for name in RUN_FILES if name != TRACE)
