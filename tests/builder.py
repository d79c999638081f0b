"""A small builder of Kineto-format traces with known answers, for exact tests.

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


# -- scenarios: synthetic traces that each embody one pattern exactly (times in µs) ---------------------
V100 = {"device_name": "Tesla V100-SXM2-32GB", "compute_capability": (7, 0), "sm_count": 80, "total_memory": 32 * 2**30}
SGEMM = "volta_sgemm_128x64_nn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, Array<char*, 3>>"
REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>"
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"


def scenario(**device: Any) -> tuple[TraceBuilder, Timeline]:
    b = TraceBuilder(**device)
    return b, Timeline(b)


def gpu_bound_trace() -> TraceBuilder:
    """V100, fp32 GEMMs of 1 ms launched back to back: the GPU never waits."""
    b, tl = scenario(**V100)
    for i in range(4):
        with tl.step(i):
            for _ in range(20):
                with tl.op("aten::mm"):
                    tl.kernel(SGEMM, 1000.0)
            tl.sync()  # the step's host range ends with its GPU work (loss.item(), say)
    return b


def launch_bound_trace() -> TraceBuilder:
    """A100, 300 tiny GEMMs per step, each behind 20 µs of op dispatch: the GPU waits for every launch."""
    b, tl = scenario()
    for i in range(4):
        with tl.step(i):
            for _ in range(300):
                with tl.op("aten::mm", overhead=10.0):
                    tl.kernel("ampere_sgemm_32x32_sliced1x4_nn", 3.0)
    return b


def sync_bound_trace() -> TraceBuilder:
    """Four times a step: 0.9 ms of GPU work, then loss.item() and 400 µs of Python before the next launch."""
    b, tl = scenario()
    for i in range(4):
        with tl.step(i):
            for _ in range(4):
                with tl.op("aten::linear"):
                    for _ in range(3):
                        tl.kernel(REDUCE, 300.0, host_us=10.0)
                with tl.op("aten::item"), tl.op("aten::_local_scalar_dense"):
                    tl.copy("DtoH", 4, gb_s=1.0)
                    tl.sync()
                tl.idle(400.0)
    return b


def cpu_bound_trace() -> TraceBuilder:
    """3 ms of CPU post-processing per step in an op that launches nothing, then 0.4 ms of GPU work."""
    b, tl = scenario()
    for i in range(4):
        with tl.step(i):
            tl.cpu("torchvision::nms", 3000.0)
            for _ in range(2):
                with tl.op("aten::mm"):
                    tl.kernel("ampere_sgemm_128x64_nn", 200.0)
    return b


def input_bound_trace() -> TraceBuilder:
    """A single-process DataLoader takes 6 ms of each step; the GPU then computes for 3 ms."""
    b, tl = scenario()
    for i in range(4):
        with tl.step(i):
            tl.dataloader(6000.0)
            for _ in range(6):
                with tl.op("aten::conv2d"):
                    tl.kernel("sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nchw", 500.0)
            tl.sync()
    return b


def copy_bound_trace() -> TraceBuilder:
    """40 MB per step copied from pageable memory at 4 GB/s (10 ms), then 2 ms of compute."""
    b, tl = scenario()
    for i in range(4):
        with tl.step(i):
            with tl.op("aten::to"), tl.op("aten::copy_"):
                tl.copy("HtoD", 40_000_000, gb_s=4.0)
                tl.sync()
            for _ in range(4):
                with tl.op("aten::conv2d"):
                    tl.kernel("sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nchw", 500.0)
            tl.sync()
    return b


def communication_bound_trace() -> TraceBuilder:
    """4 ms of compute, then a 3 ms all-reduce the optimizer waits for: nothing hides it."""
    b, tl = scenario()
    for i in range(4):
        with tl.step(i):
            for _ in range(8):
                with tl.op("aten::mm"):
                    tl.kernel("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 500.0)
            with tl.op("nccl:all_reduce", cat="user_annotation"):
                tl.kernel(NCCL, 3000.0, stream=20, after=(7,))
            with tl.op("Optimizer.step#AdamW.step", cat="user_annotation"):
                tl.kernel("void at::native::multi_tensor_apply_kernel<AdamW>", 100.0, after=(20,))
            tl.sync()
    return b


def v100_resnet50_trace() -> TraceBuilder:
    """The published V100 ResNet-50 case: num_workers=0 (a third of each step in the DataLoader), 19 MB of
    float32 images per step copied from pageable memory then a stream sync, 166 gradient memsets, 61% of
    kernels under 10 µs, fp32 convolutions (no tensor cores), compute capability 7.0."""
    b, tl = scenario(**V100)
    for i in range(4):
        with tl.step(i):
            tl.dataloader(62_000.0)
            with tl.op("aten::to"), tl.op("aten::copy_"):
                tl.copy("HtoD", 32 * 3 * 224 * 224 * 4, gb_s=6.0)  # 19,267,584 bytes: 32x3x224x224 float32
                tl.sync()
            with tl.op("Optimizer.zero_grad#SGD.zero_grad", cat="user_annotation"):
                for _ in range(166):
                    with tl.op("aten::zero_", overhead=1.0):
                        tl.memset(gpu_us=2.0, host_us=4.0)
            for j in range(300):  # 117 convolutions of ~800 µs, 183 elementwise kernels of 3 µs
                if j % 100 < 39:
                    with tl.op("aten::conv2d"):
                        tl.kernel("volta_scudnn_128x64_relu_interior_nn_v1", 800.0, host_us=8.0)
                else:
                    with tl.op("aten::add_", overhead=25.0):
                        tl.kernel(ADD, 3.0, host_us=8.0)
            with tl.op("Optimizer.step#SGD.step", cat="user_annotation"):
                tl.kernel("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<SGD>", 300.0)
            tl.sync()
    return b


def sync_causes_trace() -> TraceBuilder:
    """One step loop with five distinct synchronisations after real GPU work: .item(), a bare
    _local_scalar_dense (float(t)), .cpu(), nonzero(), and print(t) (a _tensor_str frame)."""
    b, tl = scenario()

    def work() -> None:
        for _ in range(2):
            with tl.op("aten::mean"):
                tl.kernel(REDUCE, 400.0)

    for i in range(4):
        with tl.step(i):
            work()
            with tl.op("aten::item"), tl.op("aten::_local_scalar_dense"):
                tl.copy("DtoH", 4, gb_s=1.0)
                tl.sync()
            tl.idle(300.0)
            work()
            with tl.op("aten::_local_scalar_dense"):
                tl.copy("DtoH", 4, gb_s=1.0)
                tl.sync()
            tl.idle(300.0)
            work()
            with tl.op("aten::to"), tl.op("aten::_to_copy"), tl.op("aten::copy_"):
                tl.copy("DtoH", 4096, gb_s=1.0)
                tl.sync()
            tl.idle(300.0)
            work()
            with tl.op("aten::nonzero"):
                tl.kernel("void at::native::nonzero_kernel", 5.0)
                tl.copy("DtoH", 8, gb_s=1.0)
                tl.sync()
            tl.idle(300.0)
            work()
            with tl.op("torch/_tensor_str.py(193): _tensor_str", cat="python_function"), tl.op("aten::item"), \
                    tl.op("aten::_local_scalar_dense"):
                tl.copy("DtoH", 4, gb_s=1.0)
                tl.sync()
            tl.idle(300.0)
    return b


def cpu_only_trace(kind: str) -> TraceBuilder:
    """No GPU at all: 'input' (DataLoader 70%), 'overhead' (tiny ops and Python) or 'compute' (big ops)."""
    b, tl = scenario(device_name=None)
    for i in range(4):
        with tl.step(i):
            if kind == "input":
                tl.dataloader(7000.0)
                tl.cpu("aten::addmm", 3000.0)
            elif kind == "overhead":
                for _ in range(200):
                    tl.cpu("aten::add", 5.0)
                    tl.idle(10.0)
            else:
                tl.cpu("aten::addmm", 9000.0)
                tl.idle(200.0)
    return b


def worked_example(b: TraceBuilder, linked: bool = False) -> TraceBuilder:
    """DESIGN.md's worked breakdown example (µs): kernel 15, memcpy 10, memset 5, runtime 30,
    dataloader 180, cpu_exec 35, other 125 = 400.

    DESIGN.md does not say which call launched which GPU activity; `linked` joins them as a real trace does
    (CUPTI correlation ids): the memset to the call at 360, the kernel to the call at 390, the copy to
    cudaMemcpyAsync at 405. The breakdown is the same either way."""
    b.step(1, 50, 450)
    b.dataloader(100, 280)
    b.op("aten::add", 200, 260)
    b.op("aten::to", 340, 410)
    memset_call = b.runtime("cudaLaunchKernel", 360, 380)
    kernel_call = b.runtime("cudaLaunchKernel", 390, 400)
    copy_call = b.runtime("cudaMemcpyAsync", 405, 410)
    b.memcpy("HtoD", 405, 415, nbytes=1000, correlation=copy_call if linked else None)
    b.memset(420, 425, correlation=memset_call if linked else None)
    b.kernel("k", 430, 445, correlation=kernel_call if linked else None)
    return b
