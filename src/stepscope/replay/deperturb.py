"""The job as it runs: the one correction for the profiler's cost. A live capture's timing trace is replayed with the
profiler's host cost per event taken out, checked against the unprofiled steps the capture timed.

One model of the cost, a HostCost (a cost per recorded op, runtime call, allocation and range), two ways to size it:
- calibrated: the capture measured the cost per event on its machine (calibration.json); the replay's error against
  the unprofiled step is a check of it;
- fitted, without a calibration (`--no-calibrate`, `stepscope watch`, older run folders): the default cost per event
  (host_clock.RECORDED_DEFAULT, the shape of 13 calibrations) scaled until the replayed median step comes down to the
  top of the unprofiled steps' spread (the reference plus its noise: a reference that came out low by chance must not
  over-correct). Nothing is taken out when the recorded steps are inside that spread (or faster: noise).

Here alone is decided whether and how much is taken out: the replayed trace is what every analysis reads (verdict,
breakdown, GPU use, estimates), and the overhead the report gives is this module's. When the replay cannot stand for
the job (no unprofiled reference, a host-clock reference on a GPU, a GPU trace whose launches are not linked to their
kernels, nothing beyond noise to take out), the trace is used as recorded, and the reason says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from stepscope.analysis.hostwork import host_work
from stepscope.analysis.launches import launching_call
from stepscope.analysis.steps import Steps, find_steps
from stepscope.model.calibration import ProfilerCost
from stepscope.replay.engine import Replayed, replay_with_clock
from stepscope.replay.host_clock import RECORDED_DEFAULT, HostCost, incurred_per_step
from stepscope.trace.model import Trace

# A replay further than this from the unprofiled step is reported with a warning: its shares are approximate.
TRUSTED_ERROR = 0.05
# A GPU trace with fewer of its activities linked to their launches than this cannot be replayed (a deep queue
# leaves some unlinked at the window's start: launched before the profiler recorded, kept where they ran).
MIN_LINKED = 0.5
# The fitted cost: at most this many replays to size it, stopping within FIT_TOLERANCE of its target; each round
# grows the scale by at most MAX_GROWTH (a step the host's cost no longer sets cannot be fitted by more cost).
FIT_ROUNDS = 3
FIT_TOLERANCE = 0.01
MAX_GROWTH = 4.0
CALIBRATED, FITTED = "calibration", "fitted"


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
    source: str | None = None  # CALIBRATED or FITTED: how the cost was sized
    noise: float = 0.0  # relative spread of the unprofiled steps
    comparable: bool = True  # False: a host-clock reference for a GPU run (the host runs ahead of the device)
    host_work_ns: float = 0.0  # median host work per recorded step (analysis/hostwork.py): what the cost falls on

    @property
    def trusted(self) -> bool:
        return self.replayed and self.error is not None and abs(self.error) <= TRUSTED_ERROR

    @property
    def overhead(self) -> float | None:
        """recorded / unprofiled - 1: the profiler's overhead, the report's one figure of it."""
        if not self.comparable or not self.recorded_step_ns or not self.unprofiled_step_ns:
            return None
        return self.recorded_step_ns / self.unprofiled_step_ns - 1


def host_cost(calibration: ProfilerCost) -> HostCost:
    """The HostCost of a calibration (calibration.json, measured by capture/calibrate.py)."""
    return HostCost(op_ns=calibration.op_ns, alloc_ns=calibration.alloc_ns, launch_ns=calibration.launch_ns,
                    range_ns=calibration.range_ns)


def deperturb(trace: Trace, calibration: ProfilerCost | None, unprofiled_step_ns: float | None,
              reference_method: str | None = None, noise: float = 0.0) -> Deperturbed:
    """Replay `trace` (a live capture's timing trace) without the profiler's cost, or say why not. The reference:
    the unprofiled step, how it was timed and its relative spread (the run's `Reference`)."""
    steps = find_steps(trace)
    recorded = float(np.median(steps.duration)) if len(steps) else None
    unprofiled = unprofiled_step_ns or None
    comparable = not (trace.platform == "gpu" and reference_method == "host clock")
    work = float(np.median(host_work(trace, steps).active)) if len(steps) else 0.0
    as_recorded = Deperturbed(trace, False, recorded, None, unprofiled, None, 0.0, noise=noise,
                              comparable=comparable, host_work_ns=work)
    why = _why_not(trace, unprofiled, comparable)
    if why is None and calibration is None:
        why = _within_noise(as_recorded)
    if why is not None or recorded is None or unprofiled is None:
        return replace(as_recorded, why_not=why or "the trace has no steps")
    if calibration is not None:
        cost, source = host_cost(calibration), CALIBRATED
        replayed = replay_with_clock(trace, host_cost=cost)
    else:
        fit = _fit(trace, steps, recorded, unprofiled * (1 + as_recorded.noise))
        if fit is None:
            return replace(as_recorded, why_not="no host events on the step's path to take the profiler's cost from")
        cost, replayed = fit
        source = FITTED
    step = _median_step(replayed.trace)
    return replace(as_recorded, trace=replayed.trace, replayed=True, replayed_step_ns=step,
                   error=step / unprofiled - 1 if step else None,
                   removed_ns_per_step=replayed.clock.total_removed / max(len(steps), 1), cost=cost, source=source)


def _median_step(trace: Trace) -> float | None:
    steps = find_steps(trace)
    return float(np.median(steps.duration)) if len(steps) else None


def _fit(trace: Trace, steps: Steps, recorded: float, target: float) -> tuple[HostCost, Replayed] | None:
    """The default cost per event, scaled so that the replayed median step comes down to `target`; and its replay.
    The cost inside a step lengthens it at most one for one (less where the host had slack, the GPU setting the
    pace), so the first scale is a lower bound; each further round scales by what is still to come off."""
    unit = float(np.median(incurred_per_step(trace, RECORDED_DEFAULT, steps.start, steps.end)))
    if unit <= 0:
        return None
    needed = recorded - target
    scale = needed / unit
    for _ in range(FIT_ROUNDS):
        cost = RECORDED_DEFAULT.scaled(scale)
        replayed = replay_with_clock(trace, host_cost=cost)
        gained = recorded - (_median_step(replayed.trace) or recorded)
        if gained >= needed * (1 - FIT_TOLERANCE) or gained <= 0:
            break
        scale *= min(needed / gained, MAX_GROWTH)
    return cost, replayed


def _within_noise(dep: Deperturbed) -> str | None:
    """Why a fitted cost is not taken out: the recorded steps are inside the unprofiled ones' spread, or faster."""
    overhead = dep.overhead
    if overhead is None or overhead > dep.noise:
        return None
    if overhead >= -dep.noise:
        return f"profiler overhead within noise ({overhead:+.0%}, spread ±{dep.noise:.0%}); nothing taken out"
    return (f"profiler overhead {overhead:+.0%} is noise (the machine was busier while the unprofiled steps ran); "
            "nothing taken out")


def _why_not(trace: Trace, unprofiled_step_ns: float | None, comparable: bool) -> str | None:
    if not unprofiled_step_ns:
        return "no unprofiled steps were timed to check the replay against"
    if trace.platform == "gpu":
        if not comparable:
            return ("the unprofiled steps were timed by the host clock, which on a GPU measures how fast work is "
                    "queued, not the step; profiler overhead not measured, nothing taken out")
        gpu = trace.is_gpu_activity
        linked = float((launching_call(trace)[gpu] >= 0).mean()) if gpu.any() else 0.0
        if linked < MIN_LINKED:
            return (f"only {linked:.0%} of the GPU activities are linked to the calls that launched them (no "
                    "correlation ids): the step's dependencies cannot be replayed")
    return None
