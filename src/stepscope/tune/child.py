"""One trial in a fresh process: `python -m stepscope.tune.child SPEC.json`.

It seeds random, numpy and torch with the spec's seed, installs the fixes' patches, then runs the user's
unmodified program as `python` would (capture.program): in "measure" mode it times a slice of steps at the
boundaries `stepscope run` detects, with no profiler, capturing the loss of each step; in "profile" mode it
does what `stepscope run` does (one profiled window, the diagnosis written as report.json). The result is
written as JSON to the spec's `result` path, atomically.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import sys
from pathlib import Path

from stepscope.capture.hooks import StepHooks
from stepscope.capture.meter import StepMeter
from stepscope.capture.options import CaptureOptions
from stepscope.capture.overhead import Reference
from stepscope.capture.program import Outcome, Program, run_program
from stepscope.capture.runner import capture_program
from stepscope.capture.session import activate
from stepscope.stats import step_noise
from stepscope.tune.clock import StepClock
from stepscope.tune.compiling import CompileWatch
from stepscope.tune.fixes import FIXES
from stepscope.tune.meter_windows import METER, SYNCHRONISED, metered
from stepscope.tune.points import Points
from stepscope.tune.points.failure import PatchFailure, failures_since
from stepscope.tune.story import ladder_notes, settled_by
from stepscope.tune.wire import (
    ChildResult,
    DeviceInfo,
    ReferenceWindows,
    TrialSpec,
    WindowResult,
    decode_spec,
    encode,
)

MIN_WINDOWS = 2  # fewer timed windows than this is no measurement


def seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass
    import torch

    torch.manual_seed(seed)  # every device's generator


def measure(spec: TrialSpec, program: Program, patches: Points, clock: StepClock) -> ChildResult:

    clock.set_batch_size(spec.batch_size, "user")
    hooks = StepHooks(clock)  # the clock stands in for a capture session (capture/hooks.Steps)
    clock.on_leader = hooks.drop_weaker_than
    previous = activate(clock)  # type: ignore[arg-type]  # stepscope.step() marks it too
    meter = StepMeter(None, live=False)  # times the clock's windows step by step, phases and all
    try:
        meter.install()
        hooks.install(meter)
        outcome = run_program(program, stopping=lambda: clock.stop_requested)
    finally:
        hooks.remove()
        meter.remove()
        activate(previous)
        clock.close()
    record = meter.record(clock.arbiter.leader) if clock.arbiter.leader else None
    for w in clock.windows:  # the clock chose the steps; the meter says how long they took
        m = metered(w, record, on_device=clock.timing == SYNCHRONISED)
        w.seconds, w.timer, w.phases_s = m.seconds, m.timer, m.phases_s
    timed = clock.timed()
    status = _status(outcome, clock.stop_requested, clock.aborted, clock.arbiter.leader, len(timed))
    watch = clock.compiles
    return ChildResult(
        status=status, exit_code=0 if clock.stop_requested else outcome.exit_code, program_status=outcome.status,
        detail=outcome.detail, step_source=clock.arbiter.leader, batch_size=clock.batch_size,
        steps_completed=clock.completed, warmup_ns=clock.warmup_ns(), step_ns=clock.step_ns(),
        slice_ns=sum(w.seconds for w in timed) * 1e9 if timed else None,
        timing=METER if timed and all(w.timer == METER for w in timed) else clock.timing,
        losses=patches.losses.values(), unit=clock.unit, warmup_s=round(clock.warmup_s(), 3),
        windows=[WindowResult(steps=w.steps, samples=w.samples, seconds=w.seconds, start_s=round(w.start_s, 4),
                              kind=w.kind, timer=w.timer, phases_s={k: round(v, 6) for k, v in w.phases_s.items()})
                 for w in clock.windows],
        compile_s=round(watch.total_ns / 1e9, 3) if watch.events else None, compiles=watch.events)


def _status(outcome: Outcome, stopped: bool, aborted: bool, leader: str | None, windows: int) -> str:
    if aborted:
        return "slower"
    if outcome.failed and not stopped:
        return "failed"
    if leader is None:
        return "no steps"
    return "measured" if windows >= MIN_WINDOWS else "too few steps"


def profile(spec: TrialSpec, program: Program) -> ChildResult:
    """What `stepscope run` does, with the fixes in place: one profiled window, then its report.json. For the
    tuned configuration, the report is told what the tune measured and did (tune/story.py)."""
    window = CaptureOptions(batch_size=spec.batch_size, telemetry=False)
    if spec.skip is not None:
        window = window.replace(skip=max(window.skip, spec.skip))
    folder = Path(spec.profile_folder or ".")
    folder.mkdir(parents=True, exist_ok=True)
    captured = capture_program(program, window, folder)
    # The analysis loads only once the fixed program has run: a trial's process holds none of it while it does.
    from stepscope.runreport import live_report, nothing_recorded, write_report_files

    outcome, result = captured.outcome, captured.result
    if result.trace_path is None:
        return ChildResult(status="failed", exit_code=outcome.exit_code or 2, program_status=outcome.status,
                           detail=outcome.detail or nothing_recorded(result, window),
                           step_source=result.step_source)
    if spec.reference is not None:
        ref = spec.reference
        notes = ladder_notes(spec.ladder, ref.samples_per_s, sum(ref.steps) / sum(ref.seconds))
        result = dataclasses.replace(result, reference=tune_reference(ref, result.batch_size) or result.reference,
                                     notes=[*notes, *result.notes])
    report = live_report(result, window, command=program.command, exit_code=outcome.exit_code,
                         program_status=outcome.status, folder=folder, settled=settled_by(spec.ladder),
                         meter=captured.meter)
    write_report_files(report, folder)
    return ChildResult(status="profiled", exit_code=0, program_status=outcome.status, detail=outcome.detail,
                       step_source=result.step_source, batch_size=result.batch_size,
                       steps_completed=result.steps_completed, report=str(folder / "report.json"))


def tune_reference(ref: ReferenceWindows, batch: int | None) -> Reference | None:
    """The tune's windows as the capture's unprofiled reference: the step time whose samples/s (batch / step)
    are the tune's figure, and each window's mean step."""
    steps, seconds = sum(ref.steps), sum(ref.seconds)
    if not steps or seconds <= 0:
        return None
    step_ns = batch / ref.samples_per_s * 1e9 if batch and ref.samples_per_s else seconds / steps * 1e9
    values = tuple(s / n * 1e9 for n, s in zip(ref.steps, ref.seconds, strict=True) if n)
    return Reference(method="stepscope tune: its timed windows", step_ns=step_ns, values_ns=values, steps=steps,
                     noise=step_noise(values))


def device_info(patches: Points) -> DeviceInfo:
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    model = patches.settings.model
    on_cuda = torch.cuda.is_available() and (torch.cuda.is_initialized()
                                             or (model is not None and model.device.startswith("cuda")))
    if not on_cuda:
        import platform

        return DeviceInfo(kind="cpu", name=_cpu_name() or platform.machine() or "CPU", bf16=True,
                          bf16_native=_cpu_bf16(), cpu_cores=cores, torch=str(torch.__version__))
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return DeviceInfo(kind="cuda", name=props.name, count=torch.cuda.device_count(),
                      compute_capability=f"{props.major}.{props.minor}", total_memory_bytes=int(props.total_memory),
                      bf16=bool(torch.cuda.is_bf16_supported()), bf16_native=props.major >= 8, cpu_cores=cores,
                      torch=str(torch.__version__))


def _cpu_bf16() -> bool:
    import torch

    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def run_trial(spec: TrialSpec) -> ChildResult:
    program = Program(spec.target, tuple(spec.args), module=spec.module)
    seed_everything(spec.seed)
    import torch

    windows = max(spec.windows, 1)
    watch = CompileWatch()
    if any(FIXES[f].compiles for f in spec.fixes if f in FIXES):
        watch.ready(force=True)  # registered before the first compilation
    clock = StepClock(warmup=spec.warmup, window_steps=math.ceil(spec.steps / windows),
                      window_seconds=spec.min_seconds / windows, windows=windows, abort_step_ns=spec.abort_step_ns,
                      compiles=watch)
    before = len(PatchFailure.recorded)
    points = Points(lambda: clock.completed)
    if spec.mode == "measure":
        points.loader.on_batch = clock.add_samples
        loaders = points.settings.loaders
        clock.burst_steps = lambda: loaders[0].num_workers + 1 if loaders and loaders[0].num_workers else 0
    points.framework.site = spec.framework
    patches = install(spec.fixes, points)
    try:
        result = profile(spec, program) if spec.mode == "profile" else measure(spec, program, patches, clock)
    finally:
        patches.undo()
    failed = failures_since(before)
    if failed:  # stepscope's own patch failed (here or in a DataLoader worker): not the program's failure
        result = ChildResult(status="patch failed", exit_code=1, program_status=result.program_status,
                             detail=failed[0][1], failed_fix=failed[0][0])
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        patches.settings.peak_memory_bytes = int(torch.cuda.max_memory_allocated())
    result.settings = patches.settings
    result.applied = dict(patches.applied)
    result.device = device_info(patches)
    return result


def install(fixes: dict[str, dict], points: Points) -> Points:
    """Each fix sets its part on the points (its `install`; under a framework with a setting for it, the framework's
    configuration call), then every point is put in place."""
    unknown = sorted(set(fixes) - set(FIXES))
    if unknown:
        raise ValueError(f"no way to apply {', '.join(unknown)} from outside the program")
    for fix_id, params in fixes.items():
        if not points.framework.carries(fix_id, params):
            FIXES[fix_id].install(points, params)
    points.install()
    return points


def write_result(path: str, result: ChildResult) -> None:
    target = Path(path)
    temp = target.with_name(target.name + ".tmp")
    temp.write_bytes(encode(result))
    os.replace(temp, target)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m stepscope.tune.child SPEC.json", file=sys.stderr)
        return 2
    spec = decode_spec(Path(argv[0]).read_bytes())
    try:
        result = run_trial(spec)
    except Exception as exc:  # stepscope's own failure in the child: the parent reports it, without a traceback
        fix = exc.fix if isinstance(exc, PatchFailure) else ""
        result = ChildResult(status="patch failed", exit_code=1, program_status="exception", failed_fix=fix,
                             detail=f"stepscope could not run the trial: {type(exc).__name__}: {exc}")
    write_result(spec.result, result)
    return 0 if result.status in ("measured", "profiled", "slower") else (result.exit_code or 1)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no waiting on the program's leftover threads or workers: the result is written
