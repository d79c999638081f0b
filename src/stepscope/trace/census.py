"""What a live capture saw besides the trace, read from the run folder beside it.

`census.json` (written by `stepscope run`): per device, the bytes of the model's parameters, their
gradients and the optimizer's state, and the CPU the run used; `telemetry.json`: NVML's device memory in
use. Traces from elsewhere have neither, and the analyses say what they could not split.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope.model.runfolder import CENSUS, TELEMETRY

CENSUS_SCHEMA = "stepscope.census/1"


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

    def device(self, index: int) -> DeviceCensus | None:
        return next((d for d in self.devices if d.device == index), None)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def parse_census(raw: dict[str, Any], path: str = "") -> RunCensus:
    memory = raw.get("memory") or {}
    devices = tuple(
        DeviceCensus(device=_int(d.get("device", -1)) if d.get("device", -1) != -1 else -1,
                     parameters_bytes=_int(d.get("parameters_bytes")), trainable_bytes=_int(d.get("trainable_bytes")),
                     gradients_bytes=_int(d.get("gradients_bytes")),
                     optimizer_state_bytes=_int(d.get("optimizer_state_bytes")))
        for d in memory.get("devices", []) if isinstance(d, dict))
    cpu_raw = raw.get("cpu")
    cpu = None
    if isinstance(cpu_raw, dict) and _int(cpu_raw.get("threads")) > 0:
        mhz = cpu_raw.get("max_mhz")
        cpu = CpuInfo(threads=_int(cpu_raw["threads"]), max_mhz=float(mhz) if isinstance(mhz, (int, float)) else None,
                      simd=cpu_raw.get("simd") if isinstance(cpu_raw.get("simd"), str) else None,
                      model=str(cpu_raw.get("model", "")))
    return RunCensus(devices=devices, cpu=cpu, taken=str(memory.get("taken", "")), path=path)


def _nvml_used(folder: Path) -> dict[int, int] | None:
    try:
        doc = json.loads((folder / TELEMETRY).read_text())
    except (OSError, ValueError):
        return None
    window = doc.get("window") if isinstance(doc, dict) else None
    gpus = window.get("gpu") if isinstance(window, dict) else None
    used = {_int(g.get("index")): _int(g.get("mem_used_max_bytes")) for g in gpus or []
            if isinstance(g, dict) and g.get("mem_used_max_bytes")}
    return used or None


def read_census(trace_path: str | Path) -> RunCensus | None:
    """The run folder's census and NVML memory beside a trace file, or None when there is neither. A census
    that cannot be read is treated as absent: it only refines the memory categories."""
    folder = Path(trace_path).parent
    census = None
    try:
        raw = json.loads((folder / CENSUS).read_text())
        if isinstance(raw, dict) and raw.get("schema") == CENSUS_SCHEMA:
            census = parse_census(raw, str(folder / CENSUS))
    except (OSError, ValueError):
        census = None
    nvml = _nvml_used(folder)
    if census is None and nvml is None:
        return None
    base = census or RunCensus()
    return RunCensus(devices=base.devices, cpu=base.cpu, taken=base.taken, nvml_used_max_bytes=nvml, path=base.path)
