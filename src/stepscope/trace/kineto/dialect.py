"""Every Kineto dialect difference, as data in one place: category names old and new, arg spellings."""

from __future__ import annotations

import re

from stepscope.trace.model import CopyKind, HostMemory, Kind

# Category -> kind. Old Kineto (before ~PyTorch 1.13) wrote "Kernel", "Runtime", "Operator", ...
CATEGORY_KIND: dict[str, Kind] = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "Operator": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "User annotation": Kind.USER_ANNOTATION,
    "python_function": Kind.PYTHON,
    "cuda_runtime": Kind.RUNTIME,  # ROCm traces write HIP calls under this category too
    "cuda_driver": Kind.RUNTIME,  # Triton launches through cuLaunchKernel
    "Runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "kernel": Kind.KERNEL,
    "Kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "Memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "Memset": Kind.MEMSET,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "cuda_sync": Kind.GPU_SYNC,
    "overhead": Kind.OTHER,
    "Overhead": Kind.OTHER,
}

# Non-GPU accelerators (MTIA, other PrivateUse1 backends): their runtime calls are host-side API calls,
# their device events are neither kernels nor copies we can interpret, so they stay OTHER.
OTHER_ACCELERATOR_RUNTIME_CATEGORIES = frozenset({"mtia_runtime", "privateuse1_runtime"})
OTHER_ACCELERATOR_DEVICE_CATEGORIES = frozenset({"mtia_ccp_events", "mtia_insight"})

# Categories real traces write that stepscope reads as plain host work (no note): the accelerator's own device
# events, and kinds of spans Kineto writes beside the ones above.
KNOWN_OTHER_CATEGORIES = OTHER_ACCELERATOR_DEVICE_CATEGORIES | frozenset({"cpu_instant_event", "python_function"})

# Events kept out of the table: profiler spans, flow arrows (correlation ids carry the same link).
SKIPPED_CATEGORIES = frozenset({"Trace", "ac2g", "async_gpu", "fwdbwd", "flow"})

MEMORY_EVENT_NAME = "[memory]"

_MEMCPY_NAME = re.compile(r"Memcpy\s+(HtoD|DtoH|DtoD|HtoH|PtoP)(?:\s*\((\w+)\s*->\s*(\w+)\))?", re.IGNORECASE)
_COPY_KIND = {"htod": CopyKind.HTOD, "dtoh": CopyKind.DTOH, "dtod": CopyKind.DTOD,
              "htoh": CopyKind.HTOH, "ptop": CopyKind.PTOP}
_HOST_MEMORY = {"pageable": HostMemory.PAGEABLE, "pinned": HostMemory.PINNED}


def parse_memcpy_name(name: str) -> tuple[CopyKind, HostMemory]:
    """'Memcpy HtoD (Pageable -> Device)' -> (HTOD, PAGEABLE). ROCm writes 'Host', which says nothing."""
    match = _MEMCPY_NAME.search(name)
    if not match:
        return CopyKind.OTHER, HostMemory.UNKNOWN
    kind = _COPY_KIND[match.group(1).lower()]
    host_side = match.group(2) if kind == CopyKind.HTOD else match.group(3) if kind == CopyKind.DTOH else None
    memory = _HOST_MEMORY.get((host_side or "").lower(), HostMemory.UNKNOWN)
    return kind, memory


def accelerator_of(device_names: list[str], runtime_names: set[str], categories: set[str]) -> str:
    """'cuda', 'rocm', 'other' or 'none', from what the trace itself says."""
    if categories & OTHER_ACCELERATOR_RUNTIME_CATEGORIES or categories & OTHER_ACCELERATOR_DEVICE_CATEGORIES:
        return "other"
    if any(name.startswith("hip") for name in runtime_names) or any(
        "AMD" in n or "Radeon" in n or "Instinct" in n for n in device_names
    ):
        return "rocm"
    if runtime_names or device_names:
        return "cuda"
    return "none"
