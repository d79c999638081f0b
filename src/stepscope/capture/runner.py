"""Capture a program end to end: telemetry, step hooks, the program itself, and the window's results."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stepscope.capture.attribution import AttributionWindow
from stepscope.capture.census import MemoryCensus
from stepscope.capture.hooks import StepHooks
from stepscope.capture.program import Outcome, Program, run_program
from stepscope.capture.session import CaptureResult, CaptureSession, activate
from stepscope.capture.signals import SigtermHandler
from stepscope.capture.telemetry import Telemetry, TelemetryReport
from stepscope.capture.window import WindowSpec
from stepscope.errors import StepscopeError


@dataclass(frozen=True)
class Captured:
    outcome: Outcome
    result: CaptureResult
    telemetry: TelemetryReport | None


def require_torch() -> None:
    try:
        import torch  # noqa: F401 - imported here once, before the hooks need it
    except ImportError:
        raise StepscopeError("stepscope run needs PyTorch in this environment",
                             hint="install torch, or run stepscope from the program's own environment") from None


def capture_program(
    program: Program,
    spec: WindowSpec,
    folder: Path,
    *,
    full: bool = False,
    batch_size: int | None = None,
    telemetry_interval: float | None = 0.2,
    attribution: bool = True,
    sigterm: SigtermHandler | None = None,
) -> Captured:
    """Run `program` under the step hooks; stop it once the window is recorded unless `full`."""
    require_torch()
    telemetry = Telemetry(telemetry_interval).start() if telemetry_interval else None
    listeners = [x for x in (telemetry, AttributionWindow() if attribution else None) if x is not None]
    listeners.append(MemoryCensus(folder))  # what the model and optimizer hold: the memory categories
    session = CaptureSession(spec, folder, stop_when_done=not full, listeners=listeners)
    session.set_batch_size(batch_size, "user")
    hooks = StepHooks(session)
    session.on_leader = hooks.drop_weaker_than
    previous = activate(session)
    try:
        hooks.install()
        session.begin()
        outcome = run_program(program, stopping=lambda: session.stop_requested, sigterm=sigterm)
    finally:
        hooks.remove()
        activate(previous)
        result = session.close()
        report = telemetry.stop() if telemetry is not None else None
    return Captured(outcome, result, report)
