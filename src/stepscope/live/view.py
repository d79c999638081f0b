"""The one view of a watch session that both front ends draw: typed (`View`, a msgspec struct, its field set pinned
by tests/test_watch_view.py), JSON-ready through `msgspec.to_builtins` (numbers unformatted, names as the trace has
them: the page escapes them by writing text nodes only). Every figure is the Report's or the comparison's
(live/compare.py), selected here, never computed: the batch rows are the Report's `batch_sizes`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

import msgspec

from stepscope.live.compare import Changes, LineDelta, Shift
from stepscope.live.engine import Result, Target
from stepscope.model.batches import BatchSizes, at, batch_problem
from stepscope.model.kinds import Location

TOP_LINES = 8
TOP_FIXES = 3


class Struct(msgspec.Struct, kw_only=True, omit_defaults=False, frozen=True):
    pass


class FirstView(Struct, kw_only=True):
    step_ms: float
    samples_per_s: float | None
    phases: dict[str, float]  # share of the step per phase
    source: str  # "meter" | "report"


class RunView(Struct, kw_only=True):
    run_id: int
    state: str  # "starting" | "running" | "finished"
    trigger: str
    progress: str
    elapsed_s: float
    first_figures_s: float | None
    full_view_s: float | None
    first: FirstView | None


class VerdictView(Struct, kw_only=True):
    id: str
    title: str
    share: float


class FixView(Struct, kw_only=True):
    id: str
    title: str
    speedup: float | None
    where: str | None


class ResultView(Struct, kw_only=True):
    run_id: int
    folder: str
    step_ms: float
    samples_per_s: float | None
    steps_per_s: float | None
    device: str | None
    verdict: VerdictView | None
    fixes: list[FixView]


class ErrorView(Struct, kw_only=True):
    run_id: int
    text: str


class ShiftView(Struct, kw_only=True):
    before: float
    after: float
    delta: float
    ratio: float | None
    beyond_noise: bool


class LineView(Struct, kw_only=True):
    label: str
    code: str
    gone: bool
    forward_us: float | None
    backward_us: float | None
    memory_bytes: int | None
    since_previous: dict[str, ShiftView]
    since_baseline: dict[str, ShiftView]


class PhaseView(Struct, kw_only=True):
    name: str
    now_us: float
    since_previous: ShiftView | None
    since_baseline: ShiftView | None


class NoiseView(Struct, kw_only=True):
    relative: float
    basis: str


class ChangesView(Struct, kw_only=True):
    step: dict[str, ShiftView]  # "previous" / "baseline"
    lines: list[LineView]
    phases: list[PhaseView]
    phase_source: str
    verdict_previous: str | None
    verdict_baseline: str | None
    noise: NoiseView


class Measured(Struct, kw_only=True):
    """A measurement at one batch size (live.watch's record of it)."""

    state: str  # "running" | "measured" | "failed" | "cancelled"
    for_run: int | None
    error: str | None = None
    step_us: float | None = None
    samples_per_s: float | None = None
    peak_bytes: int | None = None


class BatchRowView(Struct, kw_only=True):
    batch_size: int
    step_us: float
    samples_per_s: float
    peak_bytes: int | None
    fits: bool | None
    current: bool
    measured: Measured | None


class BatchView(Struct, kw_only=True):
    batch_size: int
    basis: str
    settable: bool
    memory_known: bool
    rows: list[BatchRowView]


class View(Struct, kw_only=True):
    version: int
    program: str
    baseline_run: int | None
    run: RunView | None
    result: ResultView | None
    error: ErrorView | None
    changes: ChangesView | None
    batch: BatchView | None
    notes: list[str]


class Session(Protocol):
    """What the view reads of a watch session (live.watch.WatchSession)."""

    version: int
    target: Target
    runs: dict[int, dict]
    current: Result | None
    baseline: Result | None
    failed: Result | None
    changes: Changes | None
    model: BatchSizes | None
    measurements: dict[int, dict]
    batch_flag: object | None
    notes: Sequence[str]


def build(session: Session) -> View:
    cur = session.current
    return View(
        version=session.version,
        program=" ".join(session.target.argv),
        baseline_run=session.baseline.run_id if session.baseline else None,
        run=_run_in_flight(session),
        result=_result(session) if cur is not None and cur.report is not None else None,
        error=(ErrorView(run_id=session.failed.run_id, text=session.failed.error or "no report")
               if session.failed is not None else None),
        changes=_changes(session.changes) if session.changes is not None and cur is not None else None,
        batch=_batch(session.model, {b: msgspec.convert(m, Measured) for b, m in session.measurements.items()
                                     if cur is not None and m.get("for_run") == cur.run_id},
                     session.batch_flag is not None),
        notes=list(session.notes),
    )


def _run_in_flight(session: Session) -> RunView | None:
    if not session.runs:
        return None
    run_id = max(session.runs)
    run = session.runs[run_id]
    first = run.get("first")
    saved = run.get("saved_at") or run.get("started")
    now = run.get("finished_at") or time.monotonic()
    return RunView(run_id=run_id, state=run.get("state", "starting"), trigger=run.get("trigger", ""),
                   progress=run.get("progress", ""), elapsed_s=round(now - saved, 2),
                   first_figures_s=round(run["first_at"] - saved, 2) if "first_at" in run else None,
                   full_view_s=round(run["finished_at"] - saved, 2) if "finished_at" in run else None,
                   first=None if first is None else FirstView(step_ms=first.step_ms, samples_per_s=first.samples_per_s,
                                                              phases=first.phases, source=first.source))


def _result(session: Session) -> ResultView:
    cur = session.current
    assert cur is not None and cur.report is not None
    r = cur.report
    p = r.patterns[0] if r.patterns else None
    return ResultView(
        run_id=cur.run_id, folder=str(cur.folder), step_ms=(r.summary.step_time_us or 0.0) / 1e3,
        samples_per_s=r.summary.samples_per_s, steps_per_s=r.summary.steps_per_s,
        device=r.device.name if r.device else None,
        verdict=VerdictView(id=p.id, title=p.title or p.id, share=p.share) if p else None,
        fixes=[FixView(id=f.id, title=f.title, speedup=f.estimated_speedup, where=_where(f.location))
               for f in r.recommendations[:TOP_FIXES]])


def _where(location: Location | None) -> str | None:
    """`file:line` of a fix's location."""
    return location.label if location is not None else None


def _shift_view(s: Shift) -> ShiftView:
    return ShiftView(before=s.before, after=s.after, delta=s.delta, ratio=s.ratio, beyond_noise=s.beyond_noise)


def _shift(s: Shift | None) -> ShiftView | None:
    return None if s is None else _shift_view(s)


def _shifts(shifts: dict[str, Shift]) -> dict[str, ShiftView]:
    return {k: _shift_view(v) for k, v in shifts.items()}


def _line(d: LineDelta) -> LineView:
    now = d.now
    return LineView(label=d.label, code=d.code, gone=now is None,
                    forward_us=now.forward_us if now else None, backward_us=now.backward_us if now else None,
                    memory_bytes=now.memory_bytes if now else None,
                    since_previous=_shifts(d.since_previous), since_baseline=_shifts(d.since_baseline))


def _changes(c: Changes) -> ChangesView:
    return ChangesView(
        step=_shifts(c.step), lines=[_line(d) for d in c.lines[:TOP_LINES]],
        phases=[PhaseView(name=p.name, now_us=p.now_us, since_previous=_shift(p.since_previous),
                          since_baseline=_shift(p.since_baseline)) for p in c.phases],
        phase_source=c.phase_source,
        verdict_previous=c.verdict_previous.pattern if c.verdict_previous else None,
        verdict_baseline=c.verdict_baseline.pattern if c.verdict_baseline else None,
        noise=NoiseView(relative=c.noise.relative, basis=c.noise.basis))


def _batch(model: BatchSizes | None, measured: dict[int, Measured], settable: bool) -> BatchView | None:
    """The Report's rows, and a row from the same model for each size measured that the rows do not have."""
    if model is None:
        return None
    sizes = sorted({r.batch_size for r in model.rows} | {b for b in measured if batch_problem(b) is None})
    rows = []
    for b in sizes:
        p = at(model, b)
        rows.append(BatchRowView(batch_size=b, step_us=p.step_us, samples_per_s=p.samples_per_s,
                                 peak_bytes=p.peak_bytes, fits=p.fits, current=b == model.batch_size,
                                 measured=measured.get(b)))
    return BatchView(batch_size=model.batch_size, basis=model.basis, settable=settable,
                     memory_known=model.fixed_bytes is not None, rows=rows)
