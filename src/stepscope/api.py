"""The Python API: profile a window of steps from inside a program and get the same Report as the CLI.

    import stepscope
    with stepscope.profile(batch_size=32) as p:
        for batch in loader:
            train_step(batch)
            p.step()
    print(p.report.patterns)

With `hooks=True` the steps are found as `stepscope run` finds them (the optimizer step, the backward pass, the
DataLoader, the model's forward), so the code inside needs no `p.step()`; the hooks come out at the end.
`stepscope.step()` marks a step in whichever capture is active (this API's, or `stepscope run`'s) and
does nothing when none is, so a program can keep the call and still run under plain `python`. Without
`out=`, the files go to a new run folder, `stepscope-runs/NAME-TIME/`, as `stepscope run` writes them;
an `out=` folder must be new or empty unless `force=True`: nothing is overwritten silently.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from stepscope.atomic import write_atomic
from stepscope.capture.attribution import AttributionWindow
from stepscope.capture.census import MemoryCensus
from stepscope.capture.hooks import StepHooks
from stepscope.capture.meter import StepMeter
from stepscope.capture.options import DEFAULTS, CaptureOptions, skipping
from stepscope.capture.runfolder import new_run_folder
from stepscope.capture.session import CaptureResult, CaptureSession, activate, active
from stepscope.capture.settings import SettingsWatch
from stepscope.capture.signals import SigtermHandler
from stepscope.capture.telemetry import Telemetry
from stepscope.errors import StepscopeError
from stepscope.model import report as s
from stepscope.model import runfolder
from stepscope.model.meter import MeterRecord
from stepscope.model.telemetry import TelemetryReport, telemetry_to_json

_D = DEFAULTS  # every default below is the one capture option's default


def step() -> None:
    """Mark the end of a step in the active capture (no-op when nothing is being captured)."""
    session = active()
    if session is not None:
        session.mark("manual")


def program_name() -> str:
    """The running script's stem (or "python"), to name the run folder."""
    argv0 = Path(sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-") else "python")
    return (argv0.parent.name if argv0.stem == "__main__" else argv0.stem) or "python"  # python -m pkg: pkg


def prepare_folder(out: str | Path | None, force: bool, name: str) -> Path:
    """A new run folder (no `out`), or `out` when it is new, empty, or `force` lets its files be replaced."""
    if out is not None and force:
        folder = Path(out)
        if folder.exists() and not folder.is_dir():
            raise StepscopeError(f"{folder}: exists and is not a folder")
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    return new_run_folder(name, out)


def _runreport() -> ModuleType:
    """The live report and the run folder's files, loaded only when asked for: the program being profiled holds
    none of the analysis until then."""
    from stepscope import runreport

    return runreport


class Profile:
    """A capture driven by explicit `step()` calls (or, with `hooks`, by the step hooks of `stepscope run`); use
    `stepscope.profile(...)` to make one."""

    def __init__(self, options: CaptureOptions = DEFAULTS, *, out: str | Path | None = None, force: bool = False,
                 source: str = "manual", name: str | None = None, hooks: bool = False) -> None:
        self.spec = options
        self._hooks: StepHooks | None = None
        self._use_hooks = hooks
        self.source = source
        self._out = Path(out) if out is not None else None
        self._force = force
        self._name = name
        self.folder: Path | None = None
        self._telemetry: Telemetry | None = None
        self._session: CaptureSession | None = None
        self._previous: CaptureSession | None = None
        self._objects: dict[str, Any] = {}
        self._sigterm: SigtermHandler | None = None
        self.result: CaptureResult | None = None
        self.telemetry: TelemetryReport | None = None
        self.meter: MeterRecord | None = None  # every step measured unprofiled, once stopped
        self._meter: StepMeter | None = None
        self._report: s.Report | None = None

    def __enter__(self) -> Profile:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def observe(self, *, model: Any = None, loader: Any = None, optimizer: Any = None) -> None:
        """Hand over the model, DataLoader and optimizer, so the report knows what they have set."""
        self._objects.update({k: v for k, v in (("model", model), ("loader", loader), ("optimizer", optimizer))
                              if v is not None})

    def start(self) -> None:
        self.folder = prepare_folder(self._out, self._force, self._name or program_name())
        if self._force:
            (self.folder / runfolder.TRACE).unlink(missing_ok=True)
        if self.spec.telemetry:
            self._telemetry = Telemetry(self.spec.telemetry_interval).start()
        self._session = CaptureSession(self.spec, self.folder, sees_backward=self._use_hooks)
        if self._use_hooks:
            self._hooks = StepHooks(self._session)
            self._session.on_leader = self._hooks.drop_weaker_than
            hooks = self._hooks
            watch = SettingsWatch(self._objects_seen, hooks.sites.location, lambda: hooks.iterators_started,
                                  lambda: hooks.batch_bytes)
        else:
            watch = SettingsWatch(self._objects_seen)
        session = self._session
        # The meter's hooks are the instrumentation layer: the step hooks and the line ranges subscribe to them. They
        # go on after the listeners' own (the census's optimizer hook, which the window's end removes: from inside
        # the meter's optimizer hook that would change torch's hook registry while it runs them).
        self._meter = session.meter = StepMeter(self.folder, syncs=self.spec.meter_syncs,
                                                batch_size=lambda: session.batch_size)
        attribution = AttributionWindow(fetch=self._meter.around_fetch) if self.spec.attribution else None
        # MemoryCensus: what the model and optimizer hold, for the memory categories.
        self._session.listeners = [x for x in (self._telemetry, watch, attribution, MemoryCensus(self.folder))
                                   if x is not None]
        self._session.set_batch_size(self.spec.batch_size, "user")
        self._meter.install()
        self._previous = activate(self._session)
        # SIGTERM or SIGHUP ends the program as it would have, but through its `with` blocks and its exit handlers
        # (which stop a capture nobody stopped, as a trainer callback without an exception hook leaves it): the
        # window is kept.
        self._sigterm = SigtermHandler(exiting=True).__enter__()
        atexit.register(self._stop_at_exit)
        if self._hooks is not None:
            self._hooks.install(self._meter)
        self._session.begin()

    def _objects_seen(self) -> tuple[Any, Any, Any]:
        """(model, loader, optimizer): those handed to observe(), else those the step hooks saw."""
        h = self._hooks
        seen = (h.known_model(), h.main_loader(), h.pinned_optimizer()) if h is not None else (None, None, None)
        o = self._objects
        return o.get("model", seen[0]), o.get("loader", seen[1]), o.get("optimizer", seen[2])

    def step(self) -> None:
        """The step that just ran is over (call it once per training or inference step)."""
        if self._session is not None:
            self._session.mark(self.source)

    def set_batch_size(self, size: int, source: str = "trainer") -> None:
        if self._session is not None:
            self._session.set_batch_size(size, source)

    def stop(self) -> CaptureResult:
        """Stop capturing (a window still running keeps what it recorded); safe to call twice."""
        if self.result is None:
            if self._session is None:
                raise StepscopeError("this profile was never started")
            if self._hooks is not None:
                self._hooks.remove()
            if active() is self._session:
                activate(self._previous)
            if self._sigterm is not None:
                self._sigterm.uninstall()
            atexit.unregister(self._stop_at_exit)
            self.result = self._session.close()
            if self._meter is not None:
                self.meter = self._meter.finish(self.result.step_source or self.source)
            if self._telemetry is not None:
                self.telemetry = self._telemetry.stop()
        return self.result

    def _stop_at_exit(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit there is no one left to tell
            self.stop()

    @property
    def done(self) -> bool:
        """The window is recorded (or cannot be): further steps cost nothing."""
        return self._session is not None and self._session.finished

    @property
    def trace_path(self) -> Path | None:
        return self.result.trace_path if self.result else None

    @property
    def report(self) -> s.Report:
        """The diagnosis of the recorded window (analysed on first use)."""
        if self._report is None:
            result = self.stop()
            self._report = _runreport().live_report(result, self.spec, command=[], exit_code=None,
                                                    telemetry=self.telemetry, folder=self.folder, meter=self.meter)
        return self._report

    def write_files(self) -> list[str]:
        """The run folder's report files beside the trace (report.json, report.txt, report.html, telemetry.json)."""
        runreport = _runreport()
        assert self.folder is not None
        written = []
        if self.telemetry is not None:
            write_atomic(self.folder / runfolder.TELEMETRY, telemetry_to_json(self.telemetry), what="telemetry",
                         hint=runreport.WRITE_HINT)
            written.append(runfolder.TELEMETRY)
        if (self.folder / runfolder.CENSUS).exists():
            written.append(runfolder.CENSUS)
        written += [name for name in (runfolder.TIMING, runfolder.CALIBRATION, runfolder.METER)
                    if (self.folder / name).is_file()]
        return sorted([*written, *runreport.write_report_files(self.report, self.folder, telemetry=self.telemetry)])


def profile(
    *,
    skip: int | None = None,
    warmup: int = _D.warmup,
    steps: int = _D.steps,
    batch_size: int | None = _D.batch_size,
    out: str | os.PathLike[str] | None = None,
    force: bool = False,
    record_shapes: bool = _D.record_shapes,
    profile_memory: bool | None = _D.profile_memory,
    with_stack: bool = _D.with_stack,
    attribution: bool = _D.attribution,
    telemetry: bool = _D.telemetry,
    telemetry_interval: float = _D.telemetry_interval,
    reference_steps: int = _D.reference_steps,
    timing_pass: bool = _D.timing_pass,
    hooks: bool = False,
) -> Profile:
    """`with stepscope.profile() as p:` ... `p.step()` once per step; `p.report` afterwards.

    skip: steps run unprofiled first (default 10, then more, up to 20, while the step meter sees them still getting
    faster or they have run under 0.1 s; a number given is exact, as `stepscope run --skip N`); warmup: profiled
    steps thrown away; steps: steps recorded;
    batch_size: samples per step (for samples/s); out: the folder for the trace and reports (default: a new
    `stepscope-runs/NAME-TIME/`); force: let `out`'s files be replaced; record_shapes, profile_memory (None:
    on with a GPU), with_stack: the profiler's options; attribution: time by source line and module;
    telemetry: CPU/GPU readings every `telemetry_interval` seconds; reference_steps: unprofiled steps timed
    after the window, so the profiler's overhead can be corrected for; timing_pass: when shapes, memory, stacks or
    attribution are recorded, first record the steps with minimal settings (the timeline the report replays), so
    the window is `warmup + steps` twice, with a step between. The steps are the `p.step()` (or
    `stepscope.step()`) calls; with `hooks`, also the optimizer steps, backward passes, DataLoader batches or model
    forwards, whichever is strongest, as `stepscope run` finds them (an explicit `p.step()` still wins).
    """
    options = CaptureOptions(**skipping(skip), warmup=warmup, steps=steps, step_on=None if hooks else "marker",
                             batch_size=batch_size,
                             record_shapes=record_shapes, profile_memory=profile_memory, with_stack=with_stack,
                             attribution=attribution, telemetry=telemetry, telemetry_interval=telemetry_interval,
                             reference_steps=reference_steps, timing_pass=timing_pass)
    return Profile(options, out=out, force=force, hooks=hooks)
