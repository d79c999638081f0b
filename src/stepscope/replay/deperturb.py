"""The job as it runs: the timing trace replayed with the profiler's calibrated host cost taken out, checked
against the unprofiled steps the capture timed.

The replayed trace is what every analysis reads for a live capture (verdict, breakdown, GPU use, idle causes,
estimates); the error against the unprofiled step is printed beside it. When the replay cannot stand for the job
(no calibration, no unprofiled reference, a GPU trace whose launches are not linked to their kernels), the trace
is used as recorded, and the reason says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stepscope.analysis.launches import launching_call
from stepscope.analysis.steps import find_steps
from stepscope.replay.engine import replay_with_clock
from stepscope.replay.host_clock import HostCost
from stepscope.trace.model import Trace

# A replay further than this from the unprofiled step is reported with a warning: its shares are approximate.
TRUSTED_ERROR = 0.05
# A GPU trace with fewer of its activities linked to their launches than this cannot be replayed (a deep queue
# leaves some unlinked at the window's start: launched before the profiler recorded, kept where they ran).
MIN_LINKED = 0.5


@dataclass(frozen=True)
class Deperturbed:
    """The timeline the report reads, and how it relates to the recorded and the unprofiled steps."""

    trace: Trace  # replayed, or the recorded one when `replayed` is False
    replayed: bool
    recorded_step_ns: float | None  # median step as recorded
    replayed_step_ns: float | None  # median step of the replay
    unprofiled_step_ns: float | None  # the capture's reference
    error: float | None  # replayed / unprofiled - 1
    removed_ns_per_step: float  # profiler cost taken out of the host's path, per step
    why_not: str | None = None  # why the trace is used as recorded
    cost: HostCost | None = None  # the cost per event taken out

    @property
    def trusted(self) -> bool:
        return self.replayed and self.error is not None and abs(self.error) <= TRUSTED_ERROR


def host_cost(calibration: dict[str, Any]) -> HostCost:
    """The HostCost of a calibration.json (capture/calibrate.ProfilerCost's fields)."""
    return HostCost(op_ns=float(calibration.get("op_ns", 0.0)), alloc_ns=float(calibration.get("alloc_ns", 0.0)),
                    launch_ns=float(calibration.get("launch_ns", 0.0)),
                    range_ns=float(calibration.get("range_ns", 0.0)))


def _median_step(trace: Trace) -> float | None:
    steps = find_steps(trace)
    return float(np.median(steps.duration)) if len(steps) else None


def deperturb(trace: Trace, calibration: dict[str, Any] | None, unprofiled_step_ns: float | None,
              reference_method: str | None = None) -> Deperturbed:
    """Replay `trace` (a live capture's timing trace) without the profiler's cost, or say why not."""
    recorded = _median_step(trace)
    why = _why_not(trace, calibration, unprofiled_step_ns, reference_method)
    if why is not None:
        return Deperturbed(trace, False, recorded, None, unprofiled_step_ns, None, 0.0, why)
    assert calibration is not None
    cost = host_cost(calibration)
    replayed = replay_with_clock(trace, host_cost=cost)
    step = _median_step(replayed.trace)
    error = step / unprofiled_step_ns - 1 if step and unprofiled_step_ns else None
    removed = replayed.clock.total_removed / max(len(find_steps(trace)), 1)
    return Deperturbed(replayed.trace, True, recorded, step, unprofiled_step_ns, error, removed, cost=cost)


def _why_not(trace: Trace, calibration: dict[str, Any] | None, unprofiled_step_ns: float | None,
             reference_method: str | None) -> str | None:
    if calibration is None:
        return "no calibration of the profiler's cost was recorded with this trace"
    if not unprofiled_step_ns:
        return "no unprofiled steps were timed to check the replay against"
    if trace.platform == "gpu":
        if reference_method == "host clock":
            return ("the unprofiled steps were timed by the host clock, which on a GPU measures how fast work is "
                    "queued, not the step")
        gpu = trace.is_gpu_activity
        linked = float((launching_call(trace)[gpu] >= 0).mean()) if gpu.any() else 0.0
        if linked < MIN_LINKED:
            return (f"only {linked:.0%} of the GPU activities are linked to the calls that launched them (no "
                    "correlation ids): the step's dependencies cannot be replayed")
    return None
