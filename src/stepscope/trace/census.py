"""What a live capture saw besides the trace, read from the run folder beside it.

`census.json` (written by `stepscope run`): per device, the bytes of the model's parameters, their
gradients and the optimizer's state, and the CPU the run used; `telemetry.json`: NVML's device memory in
use. Traces from elsewhere have neither, and the analyses say what they could not split.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec

from stepscope.model.runfile import RunFileError, load
from stepscope.model.runfolder import CENSUS, TELEMETRY
from stepscope.model.telemetry import TelemetryReport, telemetry_problem

CENSUS_SCHEMA = "stepscope.census/1"
MAX_BYTES = 1 << 60  # no device holds an exabyte


@dataclass(frozen=True)
class DeviceCensus:
    """What the model holds on one device: parameters, gradients and optimizer state."""

    device: int  # CUDA/ROCm device index, -1 for host memory
    parameters_bytes: int
    trainable_bytes: int  # parameters that require grad: what their gradients take
    gradients_bytes: int  # gradients allocated when the census was taken
    optimizer_state_bytes: int


@dataclass(frozen=True)
class CpuInfo:
    """The host's CPU as the capture saw it: threads, clock and vector units."""

    threads: int  # torch's intra-op threads: the cores a CPU run computes on
    max_mhz: float | None
    simd: str | None  # "avx512" | "avx2" | "neon" | None
    model: str = ""


@dataclass(frozen=True)
class RunCensus:
    """The capture's census of the model's memory and the machine, and when it was taken."""

    devices: tuple[DeviceCensus, ...] = ()
    cpu: CpuInfo | None = None
    taken: str = ""  # when: "after optimizer step 1", "at the model's first forward"
    nvml_used_max_bytes: dict[int, int] | None = None  # NVML index -> max memory in use over the window
    path: str = ""
    notes: tuple[str, ...] = ()  # the files beside the trace left out, and why (the report's notes)

    def device(self, index: int) -> DeviceCensus | None:
        return next((d for d in self.devices if d.device == index), None)


class _DeviceFile(msgspec.Struct):
    device: int = -1
    parameters_bytes: int = 0
    trainable_bytes: int = 0
    gradients_bytes: int = 0
    optimizer_state_bytes: int = 0


class _MemoryFile(msgspec.Struct):
    taken: str = ""
    devices: list[_DeviceFile] = msgspec.field(default_factory=list)


class _CpuFile(msgspec.Struct):
    threads: int = 0
    max_mhz: float | None = None
    simd: str | None = None
    model: str = ""


class CensusFile(msgspec.Struct):
    """census.json as capture/census.py writes it."""

    schema: str
    memory: _MemoryFile = msgspec.field(default_factory=_MemoryFile)
    cpu: _CpuFile | None = None


def census_problem(doc: CensusFile) -> str | None:
    if doc.schema != CENSUS_SCHEMA:
        return f"not a {CENSUS_SCHEMA} file (schema {doc.schema!r})"
    for d in doc.memory.devices:
        if d.device < -1:
            return f"device {d.device}: -1 (the host) or a device's index"
        sizes = (d.parameters_bytes, d.trainable_bytes, d.gradients_bytes, d.optimizer_state_bytes)
        if not all(0 <= b <= MAX_BYTES for b in sizes):
            return f"device {d.device}: a size outside 0 to 2**60 bytes"
    if doc.cpu is not None and (doc.cpu.threads < 0 or (doc.cpu.max_mhz or 0) < 0):
        return "cpu: threads and max_mhz must be 0 or more"
    return None


def parse_census(doc: CensusFile, path: str = "") -> RunCensus:
    devices = tuple(DeviceCensus(d.device, d.parameters_bytes, d.trainable_bytes, d.gradients_bytes,
                                 d.optimizer_state_bytes) for d in doc.memory.devices)
    c = doc.cpu
    cpu = CpuInfo(c.threads, c.max_mhz, c.simd, c.model) if c is not None and c.threads > 0 else None
    return RunCensus(devices=devices, cpu=cpu, taken=doc.memory.taken, path=path)


def _nvml_used(folder: Path, notes: list[str]) -> dict[int, int] | None:
    try:
        doc = load(folder / TELEMETRY, TelemetryReport, telemetry_problem)
    except RunFileError as exc:
        notes.append(exc.note)
        return None
    gpus = doc.window.gpu if doc is not None and doc.window is not None else []
    used = {g.index: g.mem_used_max_bytes for g in gpus if g.mem_used_max_bytes}
    return used or None


def read_census(trace_path: str | Path) -> RunCensus | None:
    """The run folder's census and NVML memory beside a trace file, or None when there is neither. A file that
    cannot be used only refines the memory categories: it is left out, and its note says why."""
    folder = Path(trace_path).parent
    notes: list[str] = []
    census = None
    try:
        doc = load(folder / CENSUS, CensusFile, census_problem)
        census = parse_census(doc, str(folder / CENSUS)) if doc is not None else None
    except RunFileError as exc:
        notes.append(exc.note)
    nvml = _nvml_used(folder, notes)
    if census is None and nvml is None and not notes:
        return None
    base = census or RunCensus()
    return RunCensus(devices=base.devices, cpu=base.cpu, taken=base.taken, nvml_used_max_bytes=nvml, path=base.path,
                     notes=tuple(notes))
