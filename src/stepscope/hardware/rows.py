"""Typed rows of the hardware table: a cell is one figure with the document it comes from."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
# The names torch, traces and users give a dtype -> the table's key.
_DTYPE_NAMES = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32",
    "tf32": "tf32",
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16", "c10::bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16", "c10::half": "fp16",
    "fp8": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8",
    "c10::float8_e4m3fn": "fp8", "c10::float8_e5m2": "fp8",
    "int8": "int8", "torch.int8": "int8", "signed char": "int8",
}
GIB = 1 << 30


def dtype_key(name: str) -> str | None:
    """The table's dtype key for a dtype name ('bfloat16', 'c10::BFloat16', 'float' ...), or None."""
    return _DTYPE_NAMES.get(name.strip().lower())


@dataclass(frozen=True)
class Source:
    """A document the figures come from: the vendor's own, a device's report, or a plainly named third party."""

    id: str
    title: str
    publisher: str
    url: str | None
    date: str
    kind: str  # datasheet | product-page | whitepaper | vendor-docs | device-report | third-party | user-file
    retrieved: str | None = None
    read_via: str | None = None  # the copy actually read, when the vendor's document itself was not reachable
    note: str | None = None


@dataclass(frozen=True)
class Cell:
    """One figure and its source; a missing figure (value None) says why in its note."""

    value: Any
    source: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class Peak:
    """A peak rate in TFLOP/s (TOPS for int8). `dense` is what the analyses use; `sparse` (2:4 structured
    sparsity) is kept only so the two are never confused."""

    dense: float | None
    sparse: float | None = None
    source: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class GpuSpec:
    """One GPU as its vendor rates it. Figures are per package; `devices_per_package` > 1 where one package
    shows up as several devices (MI250X: two GCDs), and the per-device accessors divide by it."""

    id: str
    name: str
    vendor: str
    architecture: str
    form_factor: str
    match: tuple[str, ...]
    aliases: tuple[str, ...]
    devices_per_package: int
    peaks: Mapping[str, Peak] = field(hash=False)
    memory_gb: Cell = Cell(None, note="not given")
    memory_bandwidth_gbs: Cell = Cell(None, note="not given")
    sm_count: Cell = Cell(None, note="not given")
    boost_clock_mhz: Cell = Cell(None, note="not given")
    tdp_w: Cell = Cell(None, note="not given")
    links: Cell = Cell((), note="not given")
    note: str | None = None

    def peak(self, dtype: str) -> Peak | None:
        key = dtype_key(dtype)
        return self.peaks.get(key) if key else None

    def peak_flops(self, dtype: str, per_device: bool = True) -> float | None:
        """Dense peak in FLOP/s (OP/s for int8) for `dtype`, or None where the vendor gives none."""
        peak = self.peak(dtype)
        if peak is None or peak.dense is None:
            return None
        return peak.dense * 1e12 / (self.devices_per_package if per_device else 1)

    def memory_bandwidth(self, per_device: bool = True) -> float | None:
        """Memory bandwidth in bytes/s."""
        value = self.memory_bandwidth_gbs.value
        return None if value is None else value * 1e9 / (self.devices_per_package if per_device else 1)

    def memory_bytes(self, per_device: bool = True) -> int | None:
        """Memory size in bytes; vendors' 'GB' of HBM and GDDR are binary (80 GB = 80 GiB)."""
        value = self.memory_gb.value
        return None if value is None else int(value * GIB / (self.devices_per_package if per_device else 1))

    def cells(self) -> Iterator[tuple[str, Cell | Peak]]:
        """Every figure of the row, named (peaks as 'peak_tflops.<dtype>')."""
        for dtype, peak in self.peaks.items():
            yield f"peak_tflops.{dtype}", peak
        for name in ("memory_gb", "memory_bandwidth_gbs", "sm_count", "boost_clock_mhz", "tdp_w", "links"):
            yield name, getattr(self, name)


@dataclass(frozen=True)
class GpuMatch:
    """A device name resolved to a row, with how it was matched and anything the match had to assume."""

    spec: GpuSpec
    matched_by: str  # "id" | "alias" | "device name" | "family"
    note: str | None = None


@dataclass(frozen=True)
class Interconnect:
    """A link generation: NVLink, PCIe, InfiniBand, Infinity Fabric."""

    id: str
    name: str
    kind: str
    links: int
    bidirectional_gbs: Cell
    per_direction_gbs: Cell

    def bytes_per_s(self) -> float | None:
        """One-way bandwidth in bytes/s: what a transfer in one direction can use."""
        value = self.per_direction_gbs.value
        return None if value is None else value * 1e9


@dataclass(frozen=True)
class Price:
    """What a cloud charges for an instance, on the date its source showed it."""

    provider: str
    instance: str
    gpu: str  # a GpuSpec id
    gpu_count: int
    region: str | None
    pricing: str  # on_demand | spot | reserved
    term: str | None
    usd_per_hour: float
    as_of: str
    source: str
    retrieved: str | None = None
    note: str | None = None

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.usd_per_hour / self.gpu_count
