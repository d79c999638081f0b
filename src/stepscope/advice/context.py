"""What every pattern and rule reads: a view of the Facts (the attribution and the signals are computed with
them) under the names the rules use."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from stepscope.analysis import signals
from stepscope.analysis.costs import StepCosts
from stepscope.analysis.facts import Facts
from stepscope.trace.model import DeviceInfo


@dataclass(frozen=True)
class Context:
    facts: Facts

    # -- the run -------------------------------------------------------------------------------
    @property
    def accelerator(self) -> str:
        """'gpu' (CUDA or ROCm events), 'cpu' (no device events) or 'other' (a non-GPU accelerator)."""
        return self.facts.trace.platform

    @property
    def step_ns(self) -> float:
        """Mean step time."""
        d = self.facts.steps.duration
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

    def part_ns(self, *parts: str) -> float:
        """Mean ns per step of the named attribution parts."""
        if self.costs is None:
            return 0.0
        return float(sum(self.costs.parts[p].mean() for p in parts))

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
