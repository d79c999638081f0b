"""What a capture session hands back at its end: the reported cycle's files put in place, and how it went."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from stepscope.capture.arbiter import StepArbiter
from stepscope.capture.cycle import Cycle, replaced_notes
from stepscope.capture.options import CaptureOptions
from stepscope.capture.result import CaptureResult
from stepscope.capture.settle import settle_timing, settle_traces


class EndedSession(Protocol):
    """What of a capture session (capture/session.py) its result is made from."""

    spec: CaptureOptions
    cycles: list[Cycle]
    out_dir: Path
    trace_name: str
    arbiter: StepArbiter
    batch_size: int | None
    batch_size_source: str | None
    sees_backward: bool
    listeners: list[Any]
    notes: list[str]


def reported_cycle(cycles: list[Cycle]) -> Cycle:
    """The cycle whose window is the answer: the last one that recorded steps, else the last."""
    return next((c for c in reversed(cycles) if c.recorded and c.exported), cycles[-1])


def capture_result(session: EndedSession) -> CaptureResult:
    """The session's result; its reported cycle's trace and timing trace become the run folder's, the others go."""
    c = reported_cycle(session.cycles)
    spec, w, recorded = session.spec, c.window, c.recorded
    path = settle_traces(session.cycles, c, session.out_dir / session.trace_name)
    timing_path, notes = settle_timing(session.cycles, c, session.out_dir)
    session.notes.extend(notes)
    listeners = session.listeners
    return CaptureResult(
        trace_path=path,
        step_source=c.leader,
        steps_completed=session.arbiter.counts[c.leader] if c.leader else 0,
        first_recorded_step=(w.first_step + spec.warmup) if w is not None and recorded else None,
        steps_recorded=recorded,
        window_complete=recorded == spec.steps and path is not None,
        batch_size=session.batch_size,
        batch_size_source=session.batch_size_source,
        gpu=w.gpu if w is not None else None,
        reference=c.times.reference(),
        recorded_step_ns=c.times.recorded_ns(),
        accumulation=c.accumulation if c.leader == "optimizer" else None,
        phase=c.phase_seen(session.sees_backward),
        step_on=spec.step_on,
        settings=next((getattr(x, "settings", None) for x in listeners if getattr(x, "settings", None)), None),
        failure=c.failure,
        timing_path=timing_path,
        calibration=c.calibration,
        notes=[*replaced_notes(session.cycles, c), *c.notes, *session.notes,
               *(n for listener in listeners for n in getattr(listener, "notes", ()))],
    )
