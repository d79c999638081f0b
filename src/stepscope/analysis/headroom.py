"""Batch headroom: the largest batch that fits, from peak = fixed + per-sample x batch. An estimate.

Fixed: parameters, gradients, optimizer state and memory held from before the step (unexplained included,
to err on the safe side); per sample: activations and temporaries over the batch. The caching allocator's
reserved/allocated ratio at the peak scales both (fragmentation), memory outside PyTorch (NVML's used minus
the allocator's reserved, when telemetry has it) is taken off the device's size, and 5% of what is left is
kept as margin: the margin whose absence makes batch-size finders pick sizes that then run out of memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stepscope.analysis.memory_usage import DevicePeak

MARGIN = 0.05
PER_SAMPLE = ("activations", "temporaries")


@dataclass(frozen=True)
class Headroom:
    """How much larger a batch the device's memory holds."""

    batch_size: int
    max_batch: int | None
    fixed_bytes: int
    per_sample_bytes: float
    capacity_bytes: int  # the device's memory less what is used outside PyTorch
    fragmentation: float  # peak reserved / peak allocated (1.0 when reserved is unknown)
    non_pytorch_bytes: int | None
    why_none: str | None = None


def non_pytorch_bytes(peak: DevicePeak, nvml_used_max: int | None) -> int | None:
    """Device memory in use that PyTorch's allocator does not hold: the CUDA context, other libraries, other
    processes (NVML's maximum over the window minus the allocator's peak reserved)."""
    if nvml_used_max is None or peak.peak_reserved is None:
        return None
    return max(nvml_used_max - peak.peak_reserved, 0)


def batch_headroom(peak: DevicePeak, batch_size: int | None, total_memory: int | None,
                   outside: int | None) -> Headroom | None:
    if not batch_size or not total_memory or peak.device < 0:
        return None
    per_sample = sum(c.bytes for c in peak.categories if c.name in PER_SAMPLE) / batch_size
    fixed = sum(c.bytes for c in peak.categories if c.name not in PER_SAMPLE)
    fragmentation = max(peak.peak_reserved / peak.peak_allocated, 1.0) if (
        peak.peak_reserved and peak.peak_allocated) else 1.0
    capacity = total_memory - (outside or 0)
    usable = capacity * (1 - MARGIN) / fragmentation
    if per_sample <= 0:
        return Headroom(batch_size, None, fixed, per_sample, capacity, fragmentation, outside,
                        "no memory grows with the batch at the peak")
    most = math.floor((usable - fixed) / per_sample)
    if most < 1:
        return Headroom(batch_size, 0, fixed, per_sample, capacity, fragmentation, outside,
                        "even one sample does not fit with the margin")
    return Headroom(batch_size, most, fixed, per_sample, capacity, fragmentation, outside)
