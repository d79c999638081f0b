"""The profiled window: a timing pass, then the recorded pass, each warm-up then recorded steps, named by the
program's own step numbers.

The profiler slows the host per recorded event, and input shapes, memory events, stacks and stepscope's line
ranges multiply that cost (docs/capture.md has the measurements). So when the recorded pass asks for any of
them, a timing pass records the steps first with the cheapest settings that still link each launch to its kernel
(CPU and CUDA activities, nothing else): the replay takes the step's timeline from it, whose profiler cost the
calibration measures (capture/calibrate.py). The recorded pass that follows, with everything asked for, gives the
attribution: lines, modules, FLOPs, memory.

A pass stops inside the boundary's hook, where ranges it recorded the start of are still open (the optimizer step's
own `Optimizer.step#...`, stepscope's line ranges). Such a range that ends while another profiler runs writes its end
into the stopped profiler's freed records: the process crashes at once or later (reproduced: a range opened in one
session and closed in the next crashed every run; closed between them, none). So a profiler never starts in the
boundary that stopped one: the recorded pass starts at the next boundary, one unprofiled step after the timing pass.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope.capture.export import Exported, export_trace
from stepscope.capture.options import CaptureOptions
from stepscope.capture.quiet import profiler_stderr
from stepscope.capture.release import release_results

WindowSpec = CaptureOptions  # the former name: which steps to profile, and how


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@dataclass(frozen=True)
class PassOptions:
    """What one profiler pass records."""

    record_shapes: bool
    profile_memory: bool
    with_stack: bool

    @property
    def minimal(self) -> bool:
        return not (self.record_shapes or self.profile_memory or self.with_stack)


TIMING = PassOptions(record_shapes=False, profile_memory=False, with_stack=False)


def recorded_pass_options(spec: CaptureOptions, gpu: bool) -> PassOptions:
    memory = spec.profile_memory if spec.profile_memory is not None else gpu
    return PassOptions(spec.record_shapes, bool(memory), spec.with_stack)


def needs_timing_pass(spec: CaptureOptions, gpu: bool) -> bool:
    """A separate timing pass, when the recorded pass costs more per event than the minimal one."""
    return spec.timing_pass and not (recorded_pass_options(spec, gpu).minimal and not spec.attribution)


class _Pass:
    """One torch.profiler run over `warmup + steps` boundaries from `first_step`."""

    def __init__(self, options: PassOptions, warmup: int, steps: int, first_step: int, path: Path,
                 gpu: bool) -> None:
        self.options, self.warmup, self.steps, self.first_step = options, warmup, steps, first_step
        self.path, self.gpu = path, gpu
        self.boundaries = 0
        self.exported: Exported | None = None
        self._prof: Any = None
        self._cut_step: int | None = None

    @property
    def length(self) -> int:
        return self.warmup + self.steps

    @property
    def recording(self) -> bool:
        return self._prof is not None and self.boundaries >= self.warmup

    @property
    def recorded(self) -> int:
        return max(0, min(self.boundaries - self.warmup, self.steps))

    @property
    def running(self) -> bool:
        return self._prof is not None

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        if self.gpu:
            activities.append(ProfilerActivity.CUDA)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # warmup=0 warns; the user chose it
            phases = schedule(wait=0, warmup=self.warmup, active=self.steps, repeat=1)
        first = self.first_step
        self._prof = profile(
            activities=activities,
            # The schedule counts from the program's step number so ProfilerStep#N matches the program's.
            schedule=lambda n: phases(max(n - first, 0)),
            on_trace_ready=self._on_trace_ready,
            record_shapes=self.options.record_shapes,
            profile_memory=self.options.profile_memory,
            with_stack=self.options.with_stack,
        )
        self._prof.step_num = first
        with profiler_stderr():
            self._prof.start()

    def step(self) -> bool:
        """One step boundary; True when this one completed the pass (its trace is then exported)."""
        if self._prof is None:
            return False
        self.boundaries += 1
        with profiler_stderr():
            self._prof.step()
        if self.boundaries >= self.length:
            self._close()
            return True
        return False

    def stop(self) -> None:
        """End early (the program ended or failed): the recorded steps are exported, the one cut short
        is renamed so it does not pass for a step."""
        if self._prof is not None:
            self._cut_step = self.first_step + self.boundaries
            self._close()

    def _close(self) -> None:
        prof, self._prof = self._prof, None
        try:
            with profiler_stderr():
                prof.stop()
        except Exception as exc:  # a profiler failure must not take the program's results
            if self.exported is None:
                self.exported = Exported(None, error=f"the profiler failed to stop: {type(exc).__name__}: {exc}")
        finally:
            release_results(prof)  # exported by now: freed here, not in the next session (capture/release.py)

    def _on_trace_ready(self, prof: Any) -> None:
        self.exported = export_trace(prof, self.path, cut_step=self._cut_step)
        if self._cut_step is not None and self.exported.path is not None:
            note = f"step {self._cut_step} was cut short when the program ended: left out of the steps"
            self.exported = Exported(self.exported.path, (*self.exported.notes, note))


class ProfilerWindow:
    """Started at step `first_step`; `step()` at each boundary. With a `timing_path`, a timing pass records the
    steps first with minimal settings; the recorded pass (the spec's settings) starts at the boundary after the
    timing pass stopped (the module's docstring says why)."""

    def __init__(self, spec: CaptureOptions, first_step: int, trace_path: Path,
                 timing_path: Path | None = None, *, deferred: bool = False) -> None:
        """`deferred`: the first pass starts at the next boundary, not with `start()` (a profiler stopped in this
        one)."""
        self.spec = spec
        self.first_step = first_step
        self.trace_path = trace_path
        self.gpu = cuda_available()
        recorded = recorded_pass_options(spec, self.gpu)
        self.timing: _Pass | None = None
        start = first_step
        if timing_path is not None and needs_timing_pass(spec, self.gpu):
            self.timing = _Pass(TIMING, spec.warmup, spec.steps, start, timing_path, self.gpu)
            start += self.timing.length + 1  # the boundary after the timing pass stopped starts the recorded pass
        self.main = _Pass(recorded, spec.warmup, spec.steps, start, trace_path, self.gpu)
        self._current: _Pass = self.timing or self.main
        self.waiting = deferred  # the current pass starts at the next boundary
        self._starts = (1 if deferred else 0) + (1 if self.timing is not None else 0)  # boundaries that only start
        self._started = 0

    @property
    def timing_options(self) -> PassOptions:
        """The settings of the trace the step's timeline comes from."""
        return self.timing.options if self.timing is not None else self.main.options

    @property
    def boundaries(self) -> int:
        return (self.timing.boundaries if self.timing else 0) + self._started + self.main.boundaries

    @property
    def length(self) -> int:
        return (self.timing.length if self.timing else 0) + self._starts + self.main.length

    @property
    def recording(self) -> bool:
        """The recorded pass is in its recorded steps (attribution and telemetry listen to this one)."""
        return self._current is self.main and self.main.recording

    @property
    def profiling(self) -> bool:
        """Any pass is recording steps (they are not unprofiled steps)."""
        return self._current.running

    @property
    def _answer(self) -> _Pass:
        """The pass whose trace is the capture's: the recorded pass, unless the program ended before it recorded a
        step and the timing pass has its steps (then that trace is the only one, with no attribution)."""
        t = self.timing
        if t is not None and self.main.recorded == 0 and t.exported is not None and t.exported.path is not None:
            return t
        return self.main

    @property
    def recorded_pass_starting(self) -> bool:
        """The recorded pass has just started at a boundary of its own (no step of it run yet)."""
        return self._current is self.main and self.main.running and self.main.boundaries == 0 and self._started > 0

    @property
    def recorded(self) -> int:
        return self._answer.recorded

    @property
    def running(self) -> bool:
        return self._current.running

    @property
    def exported(self) -> Exported | None:
        return self._answer.exported

    @property
    def timing_exported(self) -> Exported | None:
        """The timing pass's trace, beside the recorded pass's (None when it is the capture's only trace)."""
        t = self.timing
        return t.exported if t is not None and self._answer is not t else None

    def start(self) -> None:
        self._current.start()

    def step(self) -> bool:
        """One step boundary; True when this one completed the window (the traces are then exported)."""
        if self.waiting:
            self.waiting = False
            self._started += 1
            try:
                self._current.start()
            except Exception as exc:  # a timing trace is kept; the session says what is missing
                which = "recorded pass" if self.timing is not None and self._current is self.main else "profiler"
                self.main.exported = Exported(None, error=f"could not start the {which} ({exc})")
                return True
            return False
        done = self._current.step()
        if done and self._current is self.timing:
            self._current, self.waiting = self.main, True  # not in this boundary: see the module's docstring
            return False
        return done

    def stop(self) -> None:
        """End early: the pass running is exported; a recorded pass never started leaves the timing trace."""
        self._current.stop()
        t = self.timing
        if t is not None and self._answer is t and t.exported is not None:
            short = self.length - self.boundaries
            t.exported = Exported(t.exported.path, (*t.exported.notes, (
                f"the program ended {short} step(s) before the recorded pass could finish: the report is the "
                "timing pass's, with no lines, modules, FLOPs or memory; run more steps, or capture with "
                "--no-timing-pass (timing_pass=False in the API) to record them in one pass")), t.exported.error)
