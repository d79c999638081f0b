"""What every pattern and rule reads: a view of the Facts (the attribution and the signals are computed with
them) under the names the rules use, and what a live capture adds (the run section: the program's settings,
the unprofiled reference).

The step's parts (`parts`, `durations`, `part_ns`, `share`, `step_ns`) are the timeline's, taken over the typical
steps (a one-off first step aside, advice/typical.py). For a live capture that timeline is already the job without
the profiler's cost (stepscope.replay.deperturb, the one correction for it): nothing here corrects again.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from stepscope.advice.typical import one_off_note, typical_steps
from stepscope.analysis import signals
from stepscope.analysis.costs import StepCosts
from stepscope.analysis.facts import Facts
from stepscope.analysis.steps import GPU_SPAN
from stepscope.model import report as s
from stepscope.trace.model import DeviceInfo


@dataclass(frozen=True)
class Context:
    """The Facts under the names the rules use, with the run section and how the timeline was made."""

    facts: Facts
    run: s.Run | None = None  # a live capture's run section
    # The timeline is a replay with the profiler's cost taken out (a live capture's, pipeline/timeline.py): the
    # what-ifs then take no default cost out of it again.
    replayed: bool = False

    @property
    def recorded(self) -> bool:
        """A trace recorded elsewhere (no live capture's run section, its timeline not replayed without the profiler's
        cost): the profiler's cost in it is the one stepscope.replay.recorded decides. The advice's device-side
        what-ifs and predict take it out of such a trace alike (pipeline/flow.py asks this for both)."""
        return self.run is None and not self.replayed

    @property
    def settings(self) -> s.Settings | None:
        """What the program had set (a live capture), else None: fixes then judge from the trace alone."""
        return self.run.settings if self.run is not None else None

    # -- the run -------------------------------------------------------------------------------
    @property
    def accelerator(self) -> str:
        """'gpu' (CUDA or ROCm events), 'cpu' (no device events) or 'other' (a non-GPU accelerator)."""
        return self.facts.trace.platform

    @property
    def step_ns(self) -> float:
        """Mean step time over the typical steps."""
        d = self.durations[self.typical]
        return float(d.mean()) if len(d) else 0.0

    @cached_property
    def device(self) -> DeviceInfo | None:
        """The device the attribution looked at, when the trace describes it."""
        devices = self.facts.trace.meta.devices
        wanted = self.costs.device if self.costs is not None else None
        return next((d for d in devices if d.id == wanted), devices[0] if devices else None)

    @property
    def compute_capability(self) -> tuple[int, int] | None:
        d = self.device
        if d is None or d.kind != "cuda" or not d.compute_capability:
            return None
        major, _, minor = d.compute_capability.partition(".")
        return (int(major), int(minor or 0)) if major.isdigit() else None

    @property
    def memory_use(self) -> float | None:
        """Peak reserved (else allocated) device memory over the device's total, when both are known."""
        d = self.device
        if d is None or not d.total_memory_bytes:
            return None
        rows = [m for m in self.facts.memory if m.device == d.id]
        if not rows:
            return None
        peak = rows[0].peak_reserved_bytes or rows[0].peak_allocated_bytes
        return peak / d.total_memory_bytes

    # -- the attribution -----------------------------------------------------------------------
    @property
    def costs(self) -> StepCosts | None:
        return self.facts.costs

    @property
    def host_work(self) -> dict[str, np.ndarray]:
        """Per part, per step: the host work inside it (analysis/hostwork.py)."""
        return self.facts.parts.host_work

    @cached_property
    def parts(self) -> dict[str, np.ndarray]:
        """Per step, ns in each part of the step (analysis/parts.py: step_parts)."""
        return {k: np.asarray(v, dtype=np.float64) for k, v in self.facts.parts.parts.items()}

    @cached_property
    def durations(self) -> np.ndarray:
        """Per step, ns."""
        return self.facts.steps.duration.astype(np.float64)

    @cached_property
    def typical(self) -> np.ndarray:
        """Mask of the steps the verdict is taken over (a one-off first step left out)."""
        return typical_steps(self.durations)

    def notes(self) -> list[str]:
        """What the report should say about how the verdict was taken."""
        found = []
        source = self.facts.steps.source
        if source in (GPU_SPAN, "whole trace"):
            span = ("the span of GPU activity (first launch to last GPU end)" if source == GPU_SPAN
                    else "the whole trace")
            found.append(f"no steps in the trace (no ProfilerStep, optimizer-step or NVTX step ranges): the window is "
                         f"{span}, one step; mark steps with NVTX ranges or torch.profiler's prof.step(), or name "
                         "a repeated range with --step-range NAME")
        one_off = one_off_note(self.facts.steps.ids, self.durations, self.typical)
        if one_off:
            found.append(one_off)
        return found

    def part_ns(self, *parts: str) -> float:
        """Mean ns per typical step of the named parts."""
        if not len(self.facts.steps):
            return 0.0
        return float(sum(self.parts[p][self.typical].mean() for p in parts if p in self.parts))

    def share(self, *parts: str) -> float:
        return self.part_ns(*parts) / self.step_ns if self.step_ns else 0.0

    @property
    def host_wait_share(self) -> float:
        """The part of the step the GPU waits for the host, whatever the host does."""
        return self.share("input", "copy_sync", "sync", "cpu", "launch")

    @property
    def compute_share(self) -> float:
        return self.share("compute")

    # -- signals (computed with the facts; named here as the rules know them) -----------------------
    @property
    def zeroing(self) -> signals.LaunchGroup:
        return self.facts.signals.zeroing

    @property
    def optimizer(self) -> signals.LaunchGroup:
        return self.facts.signals.optimizer

    @property
    def matmul(self) -> signals.MatmulTime:
        return self.facts.signals.matmul

    @property
    def elementwise(self) -> signals.Elementwise:
        return self.facts.signals.elementwise

    @property
    def dataloader(self) -> signals.DataLoaderUse:
        return self.facts.signals.dataloader

    @property
    def host_to_device(self) -> signals.HostToDevice:
        return self.facts.signals.host_to_device

    @property
    def collectives(self) -> signals.Collectives:
        return self.facts.signals.collectives

    @property
    def launches(self) -> float:
        return self.facts.signals.launches

    @property
    def slowest_call(self) -> tuple[str, int]:
        return self.facts.signals.slowest_call
