"""What every pattern and rule reads: the facts, the step-time attribution and the signals, computed once."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from stepscope.analysis import signals
from stepscope.analysis.costs import StepCosts, step_costs
from stepscope.analysis.facts import Facts
from stepscope.trace.model import DeviceInfo


@dataclass(frozen=True)
class Context:
    facts: Facts

    # -- the run -------------------------------------------------------------------------------
    @property
    def accelerator(self) -> str:
        """'gpu' (CUDA or ROCm events), 'cpu' (no device events) or 'other' (a non-GPU accelerator)."""
        meta = self.facts.trace.meta
        if meta.accelerator == "other":
            return "other"
        return "gpu" if self.facts.trace.has_device_events and meta.accelerator != "none" else "cpu"

    @property
    def step_ns(self) -> float:
        """Mean step time."""
        d = self.facts.steps.duration
        return float(d.mean()) if len(d) else 0.0

    @property
    def step_ids(self) -> tuple[str, ...]:
        return self.facts.steps.ids

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
    @cached_property
    def costs(self) -> StepCosts | None:
        if self.accelerator != "gpu":
            return None
        return step_costs(self.facts.trace, self.facts.steps)

    def part_ns(self, *parts: str) -> float:
        """Mean ns per step of the named attribution parts."""
        if self.costs is None:
            return 0.0
        return float(sum(self.costs.parts[p].mean() for p in parts))

    def share(self, *parts: str) -> float:
        return self.part_ns(*parts) / self.step_ns if self.step_ns else 0.0

    def step_shares(self, *parts: str) -> np.ndarray:
        if self.costs is None:
            return np.zeros(len(self.facts.steps))
        return sum(self.costs.step_shares(p) for p in parts)  # type: ignore[return-value]

    @property
    def host_wait_share(self) -> float:
        """The part of the step the GPU waits for the host, whatever the host does."""
        return self.share("input", "copy_sync", "sync", "cpu", "launch")

    @property
    def compute_share(self) -> float:
        return self.share("compute")

    # -- signals -------------------------------------------------------------------------------
    @cached_property
    def zeroing(self) -> signals.LaunchGroup:
        return signals.zeroing(self.facts.trace, self.facts.steps)

    @cached_property
    def optimizer(self) -> signals.LaunchGroup:
        return signals.optimizer(self.facts.trace, self.facts.steps)

    @cached_property
    def matmul(self) -> signals.MatmulTime:
        return signals.matmul_time(self.facts.trace, self.facts.steps)

    @cached_property
    def elementwise(self) -> signals.Elementwise:
        return signals.elementwise(self.facts.trace, self.facts.steps)

    @cached_property
    def dataloader(self) -> signals.DataLoaderUse:
        return signals.dataloader(self.facts.trace, self.facts.steps)

    @cached_property
    def host_to_device(self) -> signals.HostToDevice:
        return signals.host_to_device(self.facts.trace, self.facts.steps)

    @cached_property
    def collectives(self) -> signals.Collectives:
        return signals.collectives(self.facts.trace, self.facts.steps)

    @cached_property
    def launches(self) -> float:
        return signals.launch_calls(self.facts.trace, self.facts.steps)

    @cached_property
    def slowest_call(self) -> tuple[str, int]:
        return signals.slowest_runtime_call(self.facts.trace, self.facts.steps)
