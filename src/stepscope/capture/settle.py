"""The end of a window: the profiler's cost measured on this host, and the reported cycle's files put in place
(the others' removed), with the calibration beside them."""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope.atomic import write_atomic
from stepscope.capture.calibrate import measure_profiler_cost
from stepscope.capture.quiet import profiler_stderr
from stepscope.model.runfolder import CALIBRATION, TIMING

if TYPE_CHECKING:
    from stepscope.capture.cycle import Cycle
    from stepscope.capture.window import ProfilerWindow



def calibrate_window(window: ProfilerWindow) -> tuple[dict[str, Any] | None, str | None]:
    """The profiler's cost per event with the timing trace's settings, measured now with as many events recorded
    as that trace's window recorded; or why it could not be."""
    options = window.timing_options
    exported = window.timing_exported or window.exported
    passes = window.timing if window.timing_exported is not None else window.main
    try:
        # The profiler also records the warm-up steps (and drops them): they count towards its growing cost.
        recorded = host_events(exported.path) if exported is not None and exported.path is not None else 0
        events = int(recorded * passes.length / max(passes.steps, 1))
        with profiler_stderr():
            cost = measure_profiler_cost(record_shapes=options.record_shapes, profile_memory=options.profile_memory,
                                         with_stack=options.with_stack, cuda=window.gpu, events=events)
    except Exception as exc:  # the run goes on; the report says the timeline could not be de-perturbed
        return None, (f"the profiler's cost could not be measured ({type(exc).__name__}: {exc}); the timeline is "
                      "reported as recorded")
    return cost.to_dict(), None


_HOST_EVENT = re.compile(rb'"cat": ?"(?:cpu_op|cuda_runtime|cuda_driver|user_annotation|python_function)"')


def host_events(path: Path) -> int:
    """How many host events (operators, runtime calls, ranges) a gzipped Kineto trace holds, counted in its text."""
    count, tail = 0, b""
    with gzip.open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            block = tail + chunk
            count += len(_HOST_EVENT.findall(block))
            tail = block[-64:]  # a match cut at the boundary is found once: the tail holds no whole match
            count -= len(_HOST_EVENT.findall(tail))
    return count


def settle_traces(cycles: Sequence[Cycle], reported: Cycle, final: Path) -> Path | None:
    """The reported cycle's trace becomes the trace; the others' files are removed."""
    return _settle([c.exported for c in cycles], reported.exported, final)


def settle_timing(cycles: Sequence[Cycle], reported: Cycle, folder: Path) -> tuple[Path | None, list[str]]:
    """The reported cycle's timing trace becomes timing.json.gz, and its calibration calibration.json (written whole
    or not at all; it belongs to whichever trace the timeline comes from); the other cycles' timing traces are
    removed. Returns the path and notes."""
    path = _settle([c.timing_exported for c in cycles], reported.timing_exported, folder / TIMING)
    notes = []
    if reported.calibration is not None:
        try:
            write_atomic(folder / CALIBRATION, json.dumps(reported.calibration, indent=1), what="calibration")
        except Exception as exc:  # the report is still made; it says the timeline could not be de-perturbed
            notes.append(f"{CALIBRATION} was not written ({exc})")
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
