"""The roofs a prediction scales by, read from the hardware table: peak FLOP/s per dtype, memory bandwidth, the
SIMT throughput (SMs x clock) and the links, for the origin GPU and each target."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from stepscope.errors import StepscopeError
from stepscope.hardware import Achievable, GpuSpec, HardwareTable, Interconnect, achievable_for

# The package's own folder, not importlib.resources: that loads tempfile, shutil, bz2 and lzma at import
# (hardware/table.py reads its files the same way).
DATA = Path(__file__).resolve().parent / "data"

# Where a GPU has no rate for a dtype, the rate a program written for it falls back to there.
DTYPE_FALLBACK = {"tf32": "fp32", "bf16": "fp32", "fp16": "fp32", "fp8": "bf16", "int8": "fp16"}
FALLBACK_WHY = {
    "tf32": "no TF32 tensor cores: float32 matmuls run at the FP32 rate",
    "bf16": "no bf16 tensor cores: bf16 matmuls run at the FP32 rate",
    "fp16": "no fp16 tensor-core rate in the table: fp16 matmuls taken at the FP32 rate",
    "fp8": "no FP8 rate: fp8 matmuls taken at the bf16 rate",
    "int8": "no int8 rate: int8 matmuls taken at the fp16 rate",
}


@dataclass(frozen=True)
class Roofs:
    """One GPU's ceilings, per device (an MI250X package counts as two devices)."""

    spec: GpuSpec
    flops: dict[str, float]  # table dtype -> FLOP/s
    bandwidth: float | None  # memory, bytes/s
    simt: float | None  # SMs x boost clock (Hz): what kernels bound by neither roof scale with
    host_link: Interconnect | None  # the PCIe generation host copies go through
    peer_link: Interconnect | None  # the fastest GPU-to-GPU link the part has (NVLink, Infinity Fabric, else PCIe)
    basis: str = "datasheet"  # "datasheet" | "measured" (the achievable column, used when both GPUs have one)
    bias: float | None = None  # roofline time / measured time of its kernels (data/roofline_bias.json), if known
    notes: tuple[str, ...] = field(default=())

    @property
    def id(self) -> str:
        return self.spec.id

    def flops_for(self, dtype: str) -> tuple[float | None, str | None]:
        """The rate for a dtype and, when the GPU has none and another dtype's rate stands in, why."""
        rate = self.flops.get(dtype)
        if rate is not None:
            return rate, None
        fallback = DTYPE_FALLBACK.get(dtype)
        if fallback is None:
            return None, None
        rate, _ = self.flops_for(fallback)
        return rate, f"{self.spec.name}: {FALLBACK_WHY[dtype]}"


@lru_cache(maxsize=1)
def roofline_bias() -> dict[str, object]:
    """How far below their datasheet roofs GPUs run training kernels (NeuSight's published medians)."""
    return json.loads((DATA / "roofline_bias.json").read_text())


def resolve(table: HardwareTable, name: str, what: str = "GPU") -> GpuSpec:
    """A row of the table for a user's GPU name (id, alias or device name); a one-line error when none."""
    match = table.lookup(name)
    if match is None:
        known = ", ".join(g.id for g in table.gpus)
        raise StepscopeError(f"unknown {what} {name!r}: the hardware table has no such GPU",
                             hint=f"use one of: {known} (or add a row in your hardware file, docs/hardware.md)")
    return match.spec


def _links(spec: GpuSpec, table: HardwareTable) -> tuple[Interconnect | None, Interconnect | None]:
    links = [table.interconnect(i) for i in (spec.links.value or ())]
    links = [x for x in links if x is not None]
    host = next((x for x in links if x.kind == "pcie"), None)
    peers = [x for x in links if x.kind != "pcie"] or links
    peer = max(peers, key=lambda x: x.bytes_per_s() or 0.0) if peers else None
    return host, peer


def roofs(spec: GpuSpec, table: HardwareTable, measured: Achievable | None = None) -> Roofs:
    """The GPU's roofs from the datasheet, or from a measurement of what it achieves where one is given."""
    per_device = spec.devices_per_package
    flops = {d: r for d in spec.peaks if (r := spec.peak_flops(d)) is not None}
    bandwidth = spec.memory_bandwidth()
    basis = "datasheet"
    if measured is not None:
        flops.update({d: r for d, r in measured.flops_per_s.items() if r})
        bandwidth = measured.memory_bytes_per_s or bandwidth
        basis = "measured"
    sms, clock = spec.sm_count.value, spec.boost_clock_mhz.value
    simt = sms / per_device * clock * 1e6 if sms and clock else None
    host, peer = _links(spec, table)
    bias = roofline_bias()["gpus"].get(spec.id) if basis == "datasheet" else None  # type: ignore[attr-defined]
    return Roofs(spec=spec, flops=flops, bandwidth=bandwidth, simt=simt, host_link=host, peer_link=peer, basis=basis,
                 bias=bias)


def roof_pair(origin: GpuSpec, target: GpuSpec, table: HardwareTable, origin_device: str | None = None,
              use_measured: bool = True) -> tuple[Roofs, Roofs]:
    """Origin and target roofs on the same basis: measured rates only when both GPUs have a measurement
    (a datasheet's peak and a measured rate differ by each GPU's own efficiency, which must not be mixed)."""
    if use_measured:
        mo = achievable_for(origin_device or origin.name)
        mt = achievable_for(target.name)
        if mo is not None and mt is not None:
            return roofs(origin, table, mo), roofs(target, table, mt)
    return roofs(origin, table), roofs(target, table)
