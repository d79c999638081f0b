"""One torch.profiler window: warm-up then recorded steps, named by the program's own step numbers."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from stepscope.capture.export import Exported, export_trace
from stepscope.capture.options import CaptureOptions
from stepscope.capture.quiet import profiler_stderr

WindowSpec = CaptureOptions  # the former name: which steps to profile, and how


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


class ProfilerWindow:
    """Started at step `first_step`; `step()` at each boundary; the trace is written when it completes."""

    def __init__(self, spec: CaptureOptions, first_step: int, trace_path: Path) -> None:
        self.spec = spec
        self.first_step = first_step
        self.trace_path = trace_path
        self.gpu = cuda_available()
        self.boundaries = 0  # prof.step() calls so far
        self.exported: Exported | None = None
        self._prof: Any = None
        self._cut_step: int | None = None

    @property
    def length(self) -> int:
        return self.spec.warmup + self.spec.steps

    @property
    def recording(self) -> bool:
        return self._prof is not None and self.boundaries >= self.spec.warmup

    @property
    def recorded(self) -> int:
        """Recorded steps completed so far."""
        return max(0, min(self.boundaries - self.spec.warmup, self.spec.steps))

    @property
    def running(self) -> bool:
        return self._prof is not None

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        if self.gpu:
            activities.append(ProfilerActivity.CUDA)
        memory = self.spec.profile_memory if self.spec.profile_memory is not None else self.gpu
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # warmup=0 warns; the user chose it
            phases = schedule(wait=0, warmup=self.spec.warmup, active=self.spec.steps, repeat=1)
        first = self.first_step
        self._prof = profile(
            activities=activities,
            # The schedule counts from the program's step number so ProfilerStep#N matches the program's.
            schedule=lambda n: phases(max(n - first, 0)),
            on_trace_ready=self._on_trace_ready,
            record_shapes=self.spec.record_shapes,
            profile_memory=memory,
            with_stack=self.spec.with_stack,
        )
        self._prof.step_num = first
        with profiler_stderr():
            self._prof.start()

    def step(self) -> bool:
        """One step boundary; True when this one completed the window (the trace is then exported)."""
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

    def _on_trace_ready(self, prof: Any) -> None:
        self.exported = export_trace(prof, self.trace_path, cut_step=self._cut_step)
        if self._cut_step is not None and self.exported.path is not None:
            note = f"step {self._cut_step} was cut short when the program ended: left out of the steps"
            self.exported = Exported(self.exported.path, (*self.exported.notes, note))
