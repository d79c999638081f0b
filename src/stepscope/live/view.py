"""The one view of a watch session that both front ends draw: plain JSON-ready data (numbers unformatted, names
as the trace has them: the page escapes them by writing text nodes only)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from stepscope.live.batch import BatchModel, batch_problem, predict
from stepscope.live.compare import Changes, LineDelta, Shift
from stepscope.live.engine import Result, Target

TOP_LINES = 8
TOP_FIXES = 3
BATCH_FACTORS = (0.25, 0.5, 1, 2, 4, 8)


class Session(Protocol):
    """What the view reads of a watch session (live.watch.WatchSession)."""

    version: int
    target: Target
    runs: dict[int, dict]
    current: Result | None
    baseline: Result | None
    failed: Result | None
    changes: Changes | None
    model: BatchModel | None
    measurements: dict[int, dict]
    batch_flag: object | None
    notes: Sequence[str]


def build(session: Session) -> dict[str, Any]:
    cur = session.current
    return {
        "version": session.version,
        "program": " ".join(session.target.argv),
        "baseline_run": session.baseline.run_id if session.baseline else None,
        "run": _run_in_flight(session),
        "result": _result(session) if cur is not None and cur.report is not None else None,
        "error": ({"run_id": session.failed.run_id, "text": session.failed.error or "no report"}
                  if session.failed is not None else None),
        "changes": _changes(session.changes) if session.changes is not None and cur is not None else None,
        "batch": _batch(session.model, {b: m for b, m in session.measurements.items()
                                        if cur is not None and m.get("for_run") == cur.run_id},
                        session.batch_flag is not None),
        "notes": list(session.notes),
    }


def _run_in_flight(session: Session) -> dict[str, Any] | None:
    if not session.runs:
        return None
    run_id = max(session.runs)
    run = session.runs[run_id]
    first = run.get("first")
    saved = run.get("saved_at") or run.get("started")
    now = run.get("finished_at") or time.monotonic()
    return {"run_id": run_id, "state": run.get("state", "starting"), "trigger": run.get("trigger", ""),
            "progress": run.get("progress", ""), "elapsed_s": round(now - saved, 2),
            "first_figures_s": round(run["first_at"] - saved, 2) if "first_at" in run else None,
            "full_view_s": round(run["finished_at"] - saved, 2) if "finished_at" in run else None,
            "first": None if first is None else {"step_ms": first.step_ms, "samples_per_s": first.samples_per_s,
                                                 "phases": first.phases, "source": first.source}}


def _result(session: Session) -> dict[str, Any]:
    cur = session.current
    assert cur is not None and cur.report is not None
    r = cur.report
    p = r.patterns[0] if r.patterns else None
    return {"run_id": cur.run_id, "folder": str(cur.folder),
            "step_ms": (r.summary.step_time_us or 0.0) / 1e3, "samples_per_s": r.summary.samples_per_s,
            "steps_per_s": r.summary.steps_per_s, "device": r.device.name if r.device else None,
            "verdict": {"id": p.id, "title": p.title or p.id, "share": p.share} if p else None,
            "fixes": [{"id": f.id, "title": f.title, "speedup": f.estimated_speedup,
                       "where": f"{f.location.get('file')}:{f.location.get('line')}" if f.location else None}
                      for f in r.recommendations[:TOP_FIXES]]}


def _shift(s: Shift | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"before": s.before, "after": s.after, "delta": s.delta, "ratio": s.ratio, "beyond_noise": s.beyond_noise}


def _line(d: LineDelta) -> dict[str, Any]:
    now = d.now
    return {"label": d.label, "code": d.code, "gone": now is None,
            "forward_us": now.forward_us if now else None, "backward_us": now.backward_us if now else None,
            "memory_bytes": now.memory_bytes if now else None,
            "since_previous": {k: _shift(v) for k, v in d.since_previous.items()},
            "since_baseline": {k: _shift(v) for k, v in d.since_baseline.items()}}


def _changes(c: Changes) -> dict[str, Any]:
    return {"step": {k: _shift(v) for k, v in c.step.items()},
            "lines": [_line(d) for d in c.lines[:TOP_LINES]],
            "phases": [{"name": p.name, "now_us": p.now_us, "since_previous": _shift(p.since_previous),
                        "since_baseline": _shift(p.since_baseline)} for p in c.phases],
            "phase_source": c.phase_source,
            "verdict_previous": c.verdict_previous.pattern if c.verdict_previous else None,
            "verdict_baseline": c.verdict_baseline.pattern if c.verdict_baseline else None,
            "noise": {"relative": c.noise.relative, "basis": c.noise.basis}}


def _batch(model: BatchModel | None, measured: dict[int, dict], settable: bool) -> dict[str, Any] | None:
    if model is None:
        return None
    sizes = sorted(b for b in {max(1, round(model.batch_size * f)) for f in BATCH_FACTORS} | set(measured)
                   if batch_problem(b) is None)
    rows = []
    for b in sizes:
        p = predict(model, b)
        rows.append({"batch_size": b, "step_us": p.step_us, "samples_per_s": p.samples_per_s,
                     "peak_bytes": p.peak_bytes, "fits": p.fits, "current": b == model.batch_size,
                     "measured": measured.get(b)})
    return {"batch_size": model.batch_size, "basis": model.step_basis, "settable": settable,
            "memory_known": model.fixed_bytes is not None, "rows": rows}
