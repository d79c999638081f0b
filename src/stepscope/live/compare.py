"""What changed since the previous capture and since the pinned baseline: per user line (forward and backward
time, memory), per phase, and the verdict, each change marked beyond the runs' own noise or not.

Noise is the Report's (summary.noise, computed once by the pipeline with stepscope/stats.py: the step meter's steps
wherever the meter ran). A change is beyond it when the ratio of the two values is beyond e^(stats.Z x the two runs'
noises combined) and the change is over `FLOOR_US`. A report without noise (fewer than stats.MIN_STEPS steps, or
written before reports carried it) gets a fixed `FIXED_NOISE`, and says so."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from stepscope import stats
from stepscope.compare import compare as diff_reports
from stepscope.model.diff import Diff
from stepscope.model.report import Report

R = TypeVar("R")  # a live session's run: watch's engine Result, or a Report

FIXED_NOISE = 0.10  # without per-step figures, ratios within e^±0.1 (about 10%) are taken as noise
FLOOR_US = 2.0  # a line's time changes below this (per step) are never taken as real
FLOOR_BYTES = 1024
METRICS = ("forward_us", "backward_us", "memory_bytes")


@dataclass(frozen=True)
class Noise:
    relative: float  # one run's relative spread of a mean over its steps (its standard error over the value)
    basis: str  # model/noise.NoiseBasis, or "fixed" when the report has none


@dataclass(frozen=True)
class Shift:
    """One figure then and now."""

    before: float
    after: float
    delta: float
    ratio: float | None  # after / before
    threshold: float  # the change noise can make, in the figure's unit
    beyond_noise: bool


@dataclass(frozen=True)
class LineFigures:
    forward_us: float  # per step: the larger of the host and device time of the line's forward ops
    backward_us: float  # the same for the autograd nodes of the ops it created
    memory_bytes: int | None  # activations it allocated that were live at the peak (None: memory not profiled)


@dataclass(frozen=True)
class LineDelta:
    file: str
    line: int
    code: str
    now: LineFigures | None  # None: the line is gone from the current run
    previous: LineFigures | None
    baseline: LineFigures | None
    since_previous: dict[str, Shift]  # by METRICS name, only the figures both runs have
    since_baseline: dict[str, Shift]

    @property
    def label(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class PhaseDelta:
    name: str
    now_us: float
    since_previous: Shift | None
    since_baseline: Shift | None


@dataclass(frozen=True)
class Verdict:
    pattern: str | None  # the primary pattern's id
    title: str
    share: float | None


@dataclass(frozen=True)
class Changes:
    step: dict[str, Shift]  # "previous" / "baseline": the headline step time (µs)
    lines: list[LineDelta]  # the largest change since the previous run first
    phases: list[PhaseDelta]
    phase_source: str  # "meter" | "breakdown"
    verdict_now: Verdict
    verdict_previous: Verdict | None
    verdict_baseline: Verdict | None
    noise: Noise  # the current run's
    diff_previous: Diff | None  # stepscope.compare's full Diff (kernels, config, patterns)
    diff_baseline: Diff | None


def compare(current: Report, previous: Report | None, baseline: Report | None) -> Changes:
    noise = {id(r): run_noise(r) for r in (current, previous, baseline) if r is not None}
    n_now = noise[id(current)]

    def shift(before: float, after: float, other: Report, floor: float) -> Shift:
        # said in the figure's unit for the reader: the largest change the two runs' noise can make
        limit = stats.change_limit(before, after, stats.combined(n_now.relative, noise[id(other)].relative))
        return make_shift(before, after, max(limit, floor))

    now_lines, prev_lines, base_lines = (line_figures(r) if r is not None else {}
                                         for r in (current, previous, baseline))
    codes = {k: code for r in (baseline, previous, current) if r is not None for k, code in _codes(r).items()}
    lines = []
    for key in sorted(set(now_lines) | set(prev_lines) | set(base_lines)):
        now = now_lines.get(key)
        lines.append(LineDelta(key[0], key[1], codes.get(key, ""), now, prev_lines.get(key), base_lines.get(key),
                               _line_shifts(now, prev_lines.get(key), previous, shift),
                               _line_shifts(now, base_lines.get(key), baseline, shift)))
    lines.sort(key=lambda d: (*_largest(d.since_previous), -(d.now.forward_us + d.now.backward_us if d.now else 0)))
    source, phases_now = phases_us(current)
    phases = []
    for name, us in phases_now.items():
        sides = []
        for other in (previous, baseline):
            then = phases_us(other)[1].get(name) if other is not None else None
            sides.append(shift(then, us, other, FLOOR_US) if then is not None and other is not None else None)
        phases.append(PhaseDelta(name, us, sides[0], sides[1]))
    step = {}
    for name, other in (("previous", previous), ("baseline", baseline)):
        a, b = current.summary.step_time_us, other.summary.step_time_us if other is not None else None
        if other is not None and a and b:
            step[name] = shift(b, a, other, FLOOR_US)
    return Changes(step, lines, phases, source, verdict(current), verdict(previous) if previous else None,
                   verdict(baseline) if baseline else None, n_now,
                   diff_reports(previous, current) if previous is not None else None,
                   diff_reports(baseline, current) if baseline is not None else None)


def make_shift(before: float, after: float, threshold: float) -> Shift:
    delta = after - before
    return Shift(before, after, delta, after / before if before else None, threshold, abs(delta) > threshold)


def _line_shifts(now: LineFigures | None, then: LineFigures | None, other: Report | None, shift) -> dict[str, Shift]:
    if now is None or then is None or other is None:
        return {}
    out = {"forward_us": shift(then.forward_us, now.forward_us, other, FLOOR_US),
           "backward_us": shift(then.backward_us, now.backward_us, other, FLOOR_US)}
    if now.memory_bytes is not None and then.memory_bytes is not None:
        # Memory does not vary step to step as time does: the floor alone says what is real.
        out["memory_bytes"] = make_shift(then.memory_bytes, now.memory_bytes, FLOOR_BYTES)
    return out


def _largest(shifts: dict[str, Shift]) -> tuple[int, float]:
    """Sort key: lines with a time change beyond noise first, then by the size of their largest time change."""
    times = [s for k, s in shifts.items() if k != "memory_bytes"]
    return (-any(s.beyond_noise for s in times), -max((abs(s.delta) for s in times), default=0.0))


def run_noise(report: Report) -> Noise:
    """The Report's own noise (summary.noise); `FIXED_NOISE` when it has none."""
    noise = report.summary.noise
    if noise is None:
        return Noise(FIXED_NOISE / (stats.Z * math.sqrt(2)), "fixed")  # two runs combined: a ratio beyond e^0.1
    return Noise(noise.relative, noise.basis)  # stats.mean_noise: at least stats.MIN_NOISE already


def line_figures(report: Report) -> dict[tuple[str, int], LineFigures]:
    """(file, line) -> its figures, from the report's lines and (when memory was profiled) activation lines."""
    memory: dict[tuple[str, int], int] = {}
    has_memory = bool(report.memory_usage and report.memory_usage.devices)
    for device in report.memory_usage.devices if report.memory_usage else []:
        for a in device.activation_lines:
            if a.file is not None and a.line is not None:
                memory[(a.file, a.line)] = memory.get((a.file, a.line), 0) + a.bytes
    rows = report.lines.rows if report.lines else []
    return {(r.file, r.line): LineFigures(max(r.cpu_fwd_us, r.gpu_fwd_us), max(r.cpu_bwd_us, r.gpu_bwd_us),
                                          memory.get((r.file, r.line), 0) if has_memory else None)
            for r in rows if r.file is not None and r.line is not None}


def _codes(report: Report) -> dict[tuple[str, int], str]:
    return {(r.file, r.line): r.code for r in (report.lines.rows if report.lines else [])
            if r.file is not None and r.line is not None}


def phases_us(report: Report) -> tuple[str, dict[str, float]]:
    """µs per step by phase: the step meter's (the report's "meter" section, when it has one) else the breakdown."""
    meter = getattr(report, "meter", None)
    if meter is not None and getattr(meter, "phases", None):
        return "meter", {p.name: p.mean_us for p in meter.phases}
    return "breakdown", {k: v for k, v in report.summary.breakdown_us.items() if v}


def verdict(report: Report) -> Verdict:
    if not report.patterns:
        return Verdict(None, "no pattern found", None)
    p = report.patterns[0]
    return Verdict(p.id, p.title or p.id, p.share)


class History(Generic[R]):
    """What a live session keeps to compare each new run against: the current run, the one before it and the pinned
    baseline (the first good run until another is pinned), and the current one's changes. The one session state
    watch and the language server share; `report` reads a run's Report."""

    def __init__(self, report: Callable[[R], Report]) -> None:
        self._report = report
        self.current: R | None = None
        self.previous: R | None = None
        self.baseline: R | None = None
        self.changes: Changes | None = None

    def add(self, run: R) -> Changes:
        """A new good run: it becomes the current one, compared with the one before it and the baseline."""
        self.previous, self.current = self.current, run
        if self.baseline is None:
            self.baseline = run
        prev = self._report(self.previous) if self.previous is not None else None
        base = self._report(self.baseline) if self.baseline is not run else None
        self.changes = compare(self._report(run), prev, base)
        return self.changes

    def pin(self) -> None:
        """The current run becomes the baseline (nothing has changed since a baseline it is)."""
        self.baseline = self.current
        if self.current is not None:
            prev = self._report(self.previous) if self.previous is not None else None
            self.changes = compare(self._report(self.current), prev, None)

    def runs(self) -> tuple[R, ...]:
        return tuple(r for r in (self.current, self.previous, self.baseline) if r is not None)
