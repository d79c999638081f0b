"""The end of a window: the profiler's cost measured on this host, and the reported cycle's files put in place
(the others' removed), with the calibration beside them."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope.capture.quiet import profiler_stderr

if TYPE_CHECKING:
    from stepscope.capture.cycle import Cycle
    from stepscope.capture.window import ProfilerWindow

TIMING_NAME = "timing.json.gz"  # the timing pass's trace (capture/window.py)
CALIBRATION_NAME = "calibration.json"  # the profiler's cost per event (capture/calibrate.py)


def calibrate_window(window: ProfilerWindow) -> tuple[dict[str, Any] | None, str | None]:
    """The profiler's cost per event with the timing trace's settings, measured now; or why it could not be."""
    from stepscope.capture.calibrate import measure_profiler_cost

    options = window.timing_options
    try:
        with profiler_stderr():
            cost = measure_profiler_cost(record_shapes=options.record_shapes, profile_memory=options.profile_memory,
                                         with_stack=options.with_stack, cuda=window.gpu)
    except Exception as exc:  # the run goes on; the report says the timeline could not be de-perturbed
        return None, (f"the profiler's cost could not be measured ({type(exc).__name__}: {exc}); the timeline is "
                      "reported as recorded")
    return cost.to_dict(), None


def settle_traces(cycles: Sequence[Cycle], reported: Cycle, final: Path) -> Path | None:
    """The reported cycle's trace becomes the trace; the others' files are removed."""
    return _settle([c.exported for c in cycles], reported.exported, final)


def settle_timing(cycles: Sequence[Cycle], reported: Cycle, folder: Path) -> tuple[Path | None, list[str]]:
    """The reported cycle's timing trace becomes timing.json.gz, and its calibration calibration.json (written whole
    or not at all; it belongs to whichever trace the timeline comes from); the other cycles' timing traces are
    removed. Returns the path and notes."""
    path = _settle([c.timing_exported for c in cycles], reported.timing_exported, folder / TIMING_NAME)
    notes = []
    if reported.calibration is not None:
        from stepscope.atomic import write_atomic

        try:
            write_atomic(folder / CALIBRATION_NAME, json.dumps(reported.calibration, indent=1), what="calibration")
        except Exception as exc:  # the report is still made; it says the timeline could not be de-perturbed
            notes.append(f"{CALIBRATION_NAME} was not written ({exc})")
    return path, notes


def _settle(paths: Sequence[Path | None], keep: Path | None, final: Path) -> Path | None:
    for path in paths:
        if path is not None and path != keep and path.exists():
            path.unlink()
    if keep is None:
        return None
    if keep != final:
        os.replace(keep, final)
    return final
