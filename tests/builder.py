"""Synthetic traces that each embody one pattern exactly, built with tests/trace_builder.py (whose names this module
re-exports, so `import builder as sc` gives both)."""

from __future__ import annotations

from typing import Any

from trace_builder import BACKWARD_TID as BACKWARD_TID
from trace_builder import HOST_PID as HOST_PID
from trace_builder import MAIN_TID as MAIN_TID
from trace_builder import Timeline, TraceBuilder

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
