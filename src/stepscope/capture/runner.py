"""Capture a program end to end: telemetry, step hooks, the program itself, and the window's results."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stepscope.capture.arbiter import CHOSEN
from stepscope.capture.attribution import AttributionWindow
from stepscope.capture.census import MemoryCensus
from stepscope.capture.hooks import StepHooks
from stepscope.capture.meter import StepMeter
from stepscope.capture.options import CaptureOptions
from stepscope.capture.program import Outcome, Program, run_program
from stepscope.capture.session import CaptureResult, CaptureSession, activate
from stepscope.capture.settings import SettingsWatch
from stepscope.capture.signals import SigtermHandler
from stepscope.capture.telemetry import Telemetry, TelemetryReport
from stepscope.errors import StepscopeError
from stepscope.model.meter import MeterRecord


@dataclass(frozen=True)
class Captured:
    outcome: Outcome
    result: CaptureResult
    telemetry: TelemetryReport | None
    meter: MeterRecord | None = None  # every step measured unprofiled (meter.json)


def require_torch() -> None:
    try:
        import torch  # noqa: F401 - imported here once, before the hooks need it
    except ImportError:
        raise StepscopeError("stepscope run needs PyTorch in this environment",
                             hint="install torch, or run stepscope from the program's own environment") from None


def capture_program(program: Program, spec: CaptureOptions, folder: Path, *, full: bool = False,
                    sigterm: SigtermHandler | None = None) -> Captured:
    """Run `program` under the step hooks; stop it once the window is recorded unless `full`."""
    require_torch()
    telemetry = Telemetry(spec.telemetry_interval).start() if spec.telemetry else None
    session = CaptureSession(spec, folder, stop_when_done=not full, sees_backward=True)
    session.set_batch_size(spec.batch_size, "user")
    hooks = StepHooks(session)
    watch = SettingsWatch(lambda: (hooks.known_model(), hooks.main_loader(), hooks.pinned_optimizer()),
                          hooks.sites.location, lambda: hooks.iterators_started, lambda: hooks.batch_bytes)
    # The meter's hooks are the instrumentation layer: the step detection and the line ranges subscribe to them.
    meter = session.meter = StepMeter(folder, syncs=spec.meter_syncs, batch_size=lambda: session.batch_size,
                                      chosen=CHOSEN.get(spec.step_on or ""))
    attribution = AttributionWindow(fetch=meter.around_fetch) if spec.attribution else None
    # MemoryCensus: what the model and optimizer hold, for the memory categories.
    session.listeners = [x for x in (telemetry, watch, attribution, MemoryCensus(folder)) if x is not None]
    session.on_leader = hooks.drop_weaker_than
    previous = activate(session)
    try:
        meter.install()
        hooks.install(meter)
        session.begin()
        outcome = run_program(program, stopping=lambda: session.stop_requested, sigterm=sigterm)
    finally:
        hooks.remove()
        activate(previous)
        result = session.close()
        record = meter.finish(result.step_source)
        report = telemetry.stop() if telemetry is not None else None
    return Captured(outcome, result, report, record)
