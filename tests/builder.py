"""A small builder of Kineto-format traces with known answers, for exact tests.

Times are given in µs, as Kineto writes them. Every GPU activity is linked to its launching runtime
call through a correlation id, as CUPTI does.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

HOST_PID = 1000
MAIN_TID = 1000
BACKWARD_TID = 1001


@dataclass
class TraceBuilder:
    device_name: str | None = "NVIDIA A100-SXM4-80GB"
    compute_capability: tuple[int, int] = (8, 0)
    sm_count: int = 108
    total_memory: int = 80 * 2**30
    rank: int | None = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    _correlation: count = field(default_factory=lambda: count(1))
    _external: count = field(default_factory=lambda: count(1))

    # -- host side -----------------------------------------------------------------------------
    def span(self, cat: str, name: str, start: float, end: float, tid: int = MAIN_TID, **args: Any) -> dict:
        event = {"ph": "X", "cat": cat, "name": name, "pid": HOST_PID, "tid": tid, "ts": start,
                 "dur": end - start, "args": {"External id": next(self._external), **args}}
        self.events.append(event)
        return event

    def step(self, step_id: int, start: float, end: float) -> dict:
        return self.span("user_annotation", f"ProfilerStep#{step_id}", start, end)

    def op(self, name: str, start: float, end: float, tid: int = MAIN_TID, **args: Any) -> dict:
        return self.span("cpu_op", name, start, end, tid=tid, **args)

    def annotation(self, name: str, start: float, end: float, tid: int = MAIN_TID) -> dict:
        return self.span("user_annotation", name, start, end, tid=tid)

    def dataloader(self, start: float, end: float) -> dict:
        return self.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", start, end)

    def runtime(self, name: str, start: float, end: float, tid: int = MAIN_TID) -> int:
        correlation = next(self._correlation)
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": HOST_PID, "tid": tid,
                            "ts": start, "dur": end - start,
                            "args": {"cbid": 211, "correlation": correlation, "External id": correlation}})
        return correlation

    # -- device side ---------------------------------------------------------------------------
    def _gpu(self, cat: str, name: str, start: float, end: float, correlation: int | None, stream: int,
             device: int, **args: Any) -> dict:
        event = {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": start,
                 "dur": end - start, "args": {"device": device, "stream": stream, **args}}
        if correlation is not None:
            event["args"]["correlation"] = correlation
        self.events.append(event)
        return event

    def kernel(self, name: str, start: float, end: float, correlation: int | None = None, stream: int = 7,
               device: int = 0) -> dict:
        return self._gpu("kernel", name, start, end, correlation, stream, device)

    def launch(self, name: str, call: tuple[float, float], run: tuple[float, float], stream: int = 7,
               device: int = 0, api: str = "cudaLaunchKernel", tid: int = MAIN_TID) -> dict:
        """A runtime launch call on the host and the kernel it enqueued."""
        correlation = self.runtime(api, *call, tid=tid)
        return self.kernel(name, *run, correlation=correlation, stream=stream, device=device)

    def memcpy(self, direction: str, start: float, end: float, nbytes: int, host: str = "Pageable",
               correlation: int | None = None, stream: int = 7, device: int = 0) -> dict:
        sides = {"HtoD": (host, "Device"), "DtoH": ("Device", host), "DtoD": ("Device", "Device")}[direction]
        name = f"Memcpy {direction} ({sides[0]} -> {sides[1]})"
        return self._gpu("gpu_memcpy", name, start, end, correlation, stream, device, bytes=nbytes)

    def copy(self, direction: str, call: tuple[float, float], run: tuple[float, float], nbytes: int,
             host: str = "Pageable", api: str = "cudaMemcpyAsync") -> dict:
        correlation = self.runtime(api, *call)
        return self.memcpy(direction, *run, nbytes=nbytes, host=host, correlation=correlation)

    def memset(self, start: float, end: float, nbytes: int = 1024, correlation: int | None = None) -> dict:
        return self._gpu("gpu_memset", "Memset (Device)", start, end, correlation, 7, 0, bytes=nbytes)

    # -- output --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": list(self.events)}
        if self.device_name is not None:
            major, minor = self.compute_capability
            doc["deviceProperties"] = [{"id": 0, "name": self.device_name, "totalGlobalMem": self.total_memory,
                                        "computeMajor": major, "computeMinor": minor, "numSms": self.sm_count,
                                        "warpSize": 32}]
        if self.rank is not None:
            doc["distributedInfo"] = {"rank": self.rank, "world_size": 1}
        return doc

    def write(self, path: Path) -> Path:
        data = json.dumps(self.to_dict()).encode()
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path
