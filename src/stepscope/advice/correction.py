"""The verdict as the unprofiled program would show it: the profiler's overhead taken out, one-off steps aside.

Inside the recorded window every host op costs more (the profiler, and stepscope's line ranges). A live
capture times unprofiled steps (`run.reference`; on a GPU over slices bracketed by synchronisations, so
both sides include the GPU's time). The overhead is the median recorded step, as the trace has it, over
that reference. It falls on host work (analysis/hostwork.py), not on waits, sleeps or GPU time, so when it
is beyond the spread of the unprofiled steps, each step's host work is cut by the same fraction until the
median step matches the top of that spread (the reference plus its noise: a reference that came out low by
chance must not over-correct); every part of the step (and so every share and estimate) shrinks by the
host work inside it. A trace with no unprofiled timings is left as it is.

The first step, when it takes more than ONE_OFF_RATIO times the median of at least three, is a one-off (a
start-up or first-call cost, or the profiler's own first active step, which on a GPU carries the tracer's
start): the verdict's shares are taken over the other steps, so that one step cannot decide the verdict of
all. A slow step later in the window is kept: it may recur (every fourth batch waits for the workers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.model import report as s
from stepscope.units import ns_text, report_us, share_text

# The profiler's cost can be taken out of at most this much of the host work: some work always remains.
MAX_REMOVED = 0.95
# A first step this much longer than the median step is a one-off.
ONE_OFF_RATIO = 1.25


@dataclass(frozen=True)
class Correction:
    profiled_ns: float  # median recorded step as the trace has it
    unprofiled_ns: float
    noise: float  # relative spread of the unprofiled timings
    method: str
    host_work_ns: float  # median host work per step
    removed_fraction: float  # of each step's host work, taken out as the profiler's (0: not corrected)
    not_comparable: bool = False  # a host-clock reference for a GPU run: the host runs ahead of the device

    @property
    def overhead(self) -> float:
        return self.profiled_ns / self.unprofiled_ns - 1.0

    @property
    def within_noise(self) -> bool:
        return abs(self.overhead) <= self.noise

    @property
    def applied(self) -> bool:
        return self.removed_fraction > 0

    def record(self) -> s.OverheadCorrection:
        return s.OverheadCorrection(
            profiled_step_us=report_us(self.profiled_ns), unprofiled_step_us=report_us(self.unprofiled_ns),
            overhead=None if self.not_comparable else round(self.overhead, 4), noise=round(self.noise, 4),
            within_noise=self.within_noise and not self.not_comparable,
            applied=self.applied, host_work_us_per_step=report_us(self.host_work_ns),
            removed_us_per_step=report_us(self.removed_fraction * self.host_work_ns),
            removed_share_of_host_work=round(self.removed_fraction, 4))

    def note(self) -> str:
        figures = (f"recorded steps {ns_text(self.profiled_ns)} (median, as the trace has them), unprofiled ones "
                   f"{ns_text(self.unprofiled_ns)} ({self.method})")
        if self.not_comparable:
            return (f"profiler overhead not measured: the unprofiled steps were timed on the host clock, which on a "
                    f"GPU measures how fast work is queued, not the step ({figures}); nothing corrected")
        if self.applied:
            return (f"profiler overhead {self.overhead:+.0%}: {figures}; shares and estimates are corrected for it: "
                    f"{ns_text(self.removed_fraction * self.host_work_ns)} of host work per step taken out "
                    f"({share_text(self.removed_fraction)} of it)")
        if self.within_noise:
            return f"profiler overhead within noise ({self.overhead:+.0%}, spread ±{share_text(self.noise)}): {figures}"
        if self.overhead < 0:
            return (f"profiler overhead {self.overhead:+.0%} is noise (the machine was busier while the unprofiled "
                    f"steps ran): {figures}; nothing corrected")
        return f"profiler overhead {self.overhead:+.0%}: {figures}; no host work to take it from, nothing corrected"


def measure(durations: np.ndarray, host_work: np.ndarray, run: s.Run | None, gpu: bool = False) -> Correction | None:
    """The overhead of a live capture and the fraction of host work to take out; None without a reference.
    On a GPU only a reference that includes the GPU's time (synchronized slices) compares like with like."""
    ref = run.reference if run is not None else None
    if ref is None or ref.step_us <= 0 or len(durations) == 0:
        return None
    profiled = float(np.median(durations))
    unprofiled = ref.step_us * 1e3
    work = float(np.median(host_work)) if len(host_work) else 0.0
    not_comparable = gpu and ref.method == "host clock"
    # Only the overhead beyond the spread of the unprofiled steps is taken out: a reference that came out low
    # by chance must not over-correct.
    excess = profiled - unprofiled * (1 + ref.noise)
    fraction = 0.0
    if excess > 0 and work > 0 and not not_comparable:
        fraction = min(excess / work, MAX_REMOVED)
    return Correction(profiled, unprofiled, ref.noise, ref.method, work, fraction, not_comparable)


def corrected(parts: dict[str, np.ndarray], work: dict[str, np.ndarray], fraction: float) -> dict[str, np.ndarray]:
    """Each part less its share of the host work taken out."""
    if fraction <= 0:
        return {k: np.asarray(v, dtype=np.float64) for k, v in parts.items()}
    return {k: np.maximum(np.asarray(v, dtype=np.float64) - fraction * work.get(k, 0.0), 0.0)
            for k, v in parts.items()}


def typical_steps(durations: np.ndarray) -> np.ndarray:
    """Mask of the steps the verdict is taken over: all but the one-offs."""
    n = len(durations)
    keep = np.ones(n, dtype=bool)
    if n < 3:
        return keep
    keep[0] = durations[0] <= ONE_OFF_RATIO * float(np.median(durations))
    return keep


def one_off_note(ids: tuple[str, ...], durations: np.ndarray, typical: np.ndarray) -> str | None:
    if typical.all():
        return None
    median = float(np.median(durations))
    which = [f"step {sid} ({ns_text(d)}, {d / median:.1f}x the median)" for sid, d, t in zip(ids, durations, typical,
                                                                                       strict=True) if not t]
    return (f"{', '.join(which)} left out of the verdict as a one-off (a start-up or first-call cost, or the "
            "profiler's own first active step); its figures are still in the step table")
