"""A small builder of Kineto-format traces with known answers, for exact tests: the builder and its timeline
(tests/builder.py holds the scenarios built with them and re-exports these names).

Times are given in µs, as Kineto writes them. Every GPU activity is linked to its launching runtime
call through a correlation id, as CUPTI does.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from contextlib import contextmanager
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
             host: str = "Pageable", api: str = "cudaMemcpyAsync", stream: int = 7) -> dict:
        correlation = self.runtime(api, *call)
        return self.memcpy(direction, *run, nbytes=nbytes, host=host, correlation=correlation, stream=stream)

    def memset(self, start: float, end: float, nbytes: int = 1024, correlation: int | None = None) -> dict:
        return self._gpu("gpu_memset", "Memset (Device)", start, end, correlation, 7, 0, bytes=nbytes)

    def memory_sample(self, ts: float, total_allocated: int, total_reserved: int, device: int = 0) -> dict:
        """An allocator sample ([memory] instant event, profile_memory=True) on a CUDA device."""
        event = {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": HOST_PID,
                 "tid": MAIN_TID, "ts": ts, "args": {"Device Type": 1, "Device Id": device, "Bytes": 0,
                                                     "Total Allocated": total_allocated,
                                                     "Total Reserved": total_reserved}}
        self.events.append(event)
        return event

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


@dataclass
class Timeline:
    """A causally consistent host and GPU timeline written through a TraceBuilder, in µs.

    The host clock `t` advances with every call the host makes; each stream runs its work in launch order
    and never before the launching call returns (or before the streams it waits on are done).
    """

    b: TraceBuilder
    t: float = 0.0
    free: dict[int, float] = field(default_factory=dict)  # stream -> when its last work ends
    # A profiler's host cost in µs per event, paid just after each recorded timestamp (half at an event's start,
    # half at its end), as torch.profiler's callbacks pay it: keys "op", "launch", "range".
    cost: dict[str, float] = field(default_factory=dict)

    def _pay(self, kind: str) -> None:
        self.t += self.cost.get(kind, 0.0) / 2

    def gpu_end(self) -> float:
        return max(self.free.values(), default=self.t)

    # -- host --------------------------------------------------------------------------------------
    def idle(self, us: float) -> None:
        """Host time outside any recorded op (Python, or nothing)."""
        self.t += us

    def cpu(self, name: str, us: float, tid: int = MAIN_TID) -> None:
        """A host op that launches nothing."""
        start = self.t
        self._pay("op")
        self.t += us
        self.b.op(name, start, self.t, tid=tid)
        self._pay("op")

    @contextmanager
    def op(self, name: str, overhead: float = 2.0, cat: str = "cpu_op") -> Iterator[None]:
        """A host range around whatever the body does, with a little dispatch time at each end."""
        kind = "range" if cat == "user_annotation" else "op"
        start = self.t
        self._pay(kind)
        self.t += overhead
        yield
        self.t += overhead
        self.b.span(cat, name, start, self.t)
        self._pay(kind)

    @contextmanager
    def step(self, step_id: int) -> Iterator[None]:
        start = self.t
        self._pay("range")
        yield
        self.b.step(step_id, start, self.t)
        self._pay("range")

    def worker_batch(self, ready_at: float, own: float = 20.0) -> None:
        """A batch from DataLoader workers: the call returns `own` µs after the batch is ready (the workers run
        on their own clock, so `ready_at` is a time, not a duration)."""
        start = self.t
        self._pay("op")
        self.t = max(self.t, ready_at) + own
        self.b.op("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", start, self.t)
        self._pay("op")

    def dataloader(self, us: float, workers: bool = False) -> None:
        kind = "_MultiProcessingDataLoaderIter" if workers else "_SingleProcessDataLoaderIter"
        self.b.op(f"enumerate(DataLoader)#{kind}.__next__", self.t, self.t + us)
        self.t += us

    # -- launches ----------------------------------------------------------------------------------
    def _start(self, stream: int, after: tuple[int, ...]) -> float:
        return max([self.t, self.free.get(stream, 0.0), *(self.free.get(s, 0.0) for s in after)])

    def kernel(self, name: str, gpu_us: float, host_us: float = 5.0, stream: int = 7, after: tuple[int, ...] = (),
               api: str = "cudaLaunchKernel") -> None:
        call_start = self.t
        self._pay("launch")
        self.t += host_us
        call = (call_start, self.t)
        start = self._start(stream, after)
        self.b.launch(name, call, (start, start + gpu_us), stream=stream, api=api)
        self.free[stream] = start + gpu_us
        self._pay("launch")

    def memset(self, gpu_us: float = 1.0, host_us: float = 4.0, nbytes: int = 4096) -> None:
        correlation = self.b.runtime("cudaMemsetAsync", self.t, self.t + host_us)
        self.t += host_us
        start = self._start(7, ())
        self.b.memset(start, start + gpu_us, nbytes=nbytes, correlation=correlation)
        self.free[7] = start + gpu_us

    def copy(self, direction: str, nbytes: int, gb_s: float, host: str = "Pageable", blocking: bool = True,
             stream: int = 7, after: tuple[int, ...] = ()) -> None:
        """cudaMemcpyAsync on `stream` (after the streams `after`); from/to pageable memory the call returns only
        when the copy is done."""
        call_start = self.t
        start = self._start(stream, after) + 2.0
        end = start + nbytes / gb_s / 1e3
        call_end = end + 1.0 if blocking else call_start + 5.0
        self.b.copy(direction, (call_start, call_end), (start, end), nbytes, host=host, stream=stream)
        self.free[stream] = end
        self.t = call_end

    def sync(self, api: str = "cudaStreamSynchronize") -> None:
        """The host blocks until every stream is done."""
        start = self.t
        self._pay("launch")
        self.t = max(self.t, self.gpu_end()) + 2.0
        self.b.runtime(api, start, self.t)
        self._pay("launch")
