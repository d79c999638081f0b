"""Device memory from the allocator's samples: peak allocated and reserved per device."""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.trace.model import Trace, distinct


@dataclass(frozen=True)
class DeviceMemory:
    """One device's allocator peaks, from the trace's memory samples."""

    device: int  # -1 for host memory
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None
    samples: int


def memory_summary(trace: Trace) -> tuple[DeviceMemory, ...]:
    mem = trace.memory
    result = []
    for device in distinct(mem.device):
        sel = mem.device == device
        allocated = mem.total_allocated[sel]
        reserved = mem.total_reserved[sel]
        if not (allocated >= 0).any():
            continue
        result.append(
            DeviceMemory(
                device=int(device),
                peak_allocated_bytes=int(allocated.max()),
                peak_reserved_bytes=int(reserved.max()) if (reserved >= 0).any() else None,
                samples=int(sel.sum()),
            )
        )
    return tuple(result)
