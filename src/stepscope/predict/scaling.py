"""Each GPU activity's duration on the target: the part above a fixed floor scales by the origin/target ratio of
the roof that bounds it, so the efficiency the activity reached on the origin carries over (the roofline's
bias is per GPU, and a ratio of roofs divides it out)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.predict.gpus import Roofs
from stepscope.predict.work import DTYPES, Bound, GpuWork

# The part of a kernel's time that no roof shortens: launch on the device, ramp-up, the tail. Kernels shorter
# than this keep their time. Chosen, not fitted: the shortest kernels in our H100/H200 traces run 0.6-1.0 µs.
FLOOR_NS = 1_500
# A host copy that reached this share of its link's one-way rate is bound by the link; slower ones by the host
# (pageable memory, staging), and keep their rate unless the target's link is slower still.
LINK_BOUND_SHARE = 0.5


@dataclass(frozen=True)
class Scaled:
    """New durations (ns, aligned with GpuWork.rows), the ratio applied per activity, and what was assumed."""

    dur: np.ndarray
    ratio: np.ndarray
    assumptions: tuple[str, ...]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _compute_ratios(work: GpuWork, origin: Roofs, target: Roofs, notes: list[str]) -> np.ndarray:
    ratios = np.ones(len(work))
    for code in np.unique(work.dtype[work.bound == Bound.COMPUTE]):
        dtype = DTYPES[code]
        p_origin, _ = origin.flops_for(dtype)
        p_target, why = target.flops_for(dtype)
        r = _ratio(p_origin, p_target)
        if why:
            notes.append(why)
        if r is None:
            notes.append(f"no {dtype} peak for {origin.spec.name if not p_origin else target.spec.name}: "
                         f"{dtype} matmuls kept at the origin's time")
            continue
        ratios[(work.bound == Bound.COMPUTE) & (work.dtype == code)] = r
    return ratios


def _simple_ratio(kind: str, a: float | None, b: float | None, notes: list[str], what: str) -> float:
    r = _ratio(a, b)
    if r is None:
        notes.append(f"no {kind} figure for one of the GPUs: {what} kept at the origin's time")
        return 1.0
    return r


def wave_factor(blocks: np.ndarray, per_sm: np.ndarray, sms_origin: float | None,
                sms_target: float | None) -> np.ndarray:
    """How much a kernel's grid fills the last wave on each GPU, target over origin: a peak ratio assumes every SM
    busy all the time, but a grid of B blocks runs in ceil(B / (SMs x blocks per SM)) waves, the last one partly
    empty. 1 where the grid or the SM counts are unknown."""
    out = np.ones(len(blocks))
    if not sms_origin or not sms_target:
        return out
    known = np.isfinite(blocks) & np.isfinite(per_sm) & (blocks > 0) & (per_sm > 0)
    b, r = blocks[known], per_sm[known]
    waves_o, waves_t = b / (sms_origin * r), b / (sms_target * r)
    out[known] = (np.ceil(waves_t) / waves_t) / (np.ceil(waves_o) / waves_o)
    return out


def _bias(origin: Roofs, target: Roofs, notes: list[str]) -> float:
    """Origin bias / target bias: a GPU whose kernels run further below its datasheet roofs is slower than the
    ratio of datasheets says. Known for a few GPUs only; without both, the two are taken as equally efficient."""
    if origin.basis == "measured" or origin.spec.id == target.spec.id:
        return 1.0
    if origin.bias and target.bias:
        notes.append(f"roofline bias divided out: kernels reach {origin.bias:.2f} of the roofline on the "
                     f"{origin.spec.name}, {target.bias:.2f} on the {target.spec.name} (NeuSight's published medians)")
        return origin.bias / target.bias
    missing = " and ".join(r.spec.name for r in (origin, target) if not r.bias)
    notes.append(f"no published roofline bias for the {missing}: both GPUs taken to reach the same share of "
                 "their datasheet roofs")
    return 1.0


def _host_copy(dur: np.ndarray, nbytes: np.ndarray, origin: Roofs, target: Roofs, notes: list[str]) -> np.ndarray:
    """Host copies keep their measured rate unless they were link-bound (then the link ratio applies) or the
    target's link cannot carry that rate."""
    lo = origin.host_link.bytes_per_s() if origin.host_link else None
    lt = target.host_link.bytes_per_s() if target.host_link else None
    if not lo or not lt:
        notes.append("host link unknown for one of the GPUs: host copies kept at the origin's time")
        return dur.astype(np.float64)
    rate = np.where(dur > 0, nbytes / np.maximum(dur, 1) * 1e9, np.nan)
    link_bound = np.isfinite(rate) & (rate >= LINK_BOUND_SHARE * lo)
    new = np.where(link_bound, dur * lo / lt, dur).astype(np.float64)
    if lt < lo:  # never faster than the slower link allows
        known = np.isfinite(rate)
        new[known] = np.maximum(new[known], nbytes[known] / lt * 1e9)
    if origin.host_link.id != target.host_link.id:  # type: ignore[union-attr]
        notes.append(f"host copies over {target.host_link.name} on the {target.spec.name} "  # type: ignore[union-attr]
                     f"(the origin's {origin.host_link.name}); the host's memory is assumed the same")  # type: ignore[union-attr]
    return new


def scale(work: GpuWork, dur: np.ndarray, origin: Roofs, target: Roofs) -> Scaled:
    """Durations on the target for the activities in `work` (their measured durations in `dur`, ns)."""
    notes: list[str] = []
    ratio = _compute_ratios(work, origin, target, notes)
    b = work.bound
    if (b == Bound.MEMORY).any():
        ratio[b == Bound.MEMORY] = _simple_ratio("memory bandwidth", origin.bandwidth, target.bandwidth, notes,
                                                 "memory-bound kernels")
    if (b == Bound.LATENCY).any():
        ratio[b == Bound.LATENCY] = _simple_ratio("SM count or clock", origin.simt, target.simt, notes,
                                                  "latency-bound kernels")
    if (b == Bound.PEER).any():
        lo, lt = origin.peer_link, target.peer_link
        ratio[b == Bound.PEER] = _simple_ratio("GPU-to-GPU link", lo and lo.bytes_per_s(), lt and lt.bytes_per_s(),
                                               notes, "collectives")
        if lo and lt:
            notes.append(f"collectives scaled from {lo.name} to {target.spec.name}'s {lt.name}, on the same "
                         "topology and number of GPUs (an assumption)")
    roofed = (b == Bound.COMPUTE) | (b == Bound.MEMORY)
    if roofed.any():
        ratio[roofed] *= _bias(origin, target, notes)
    if work.blocks is not None and work.blocks_per_sm is not None:
        sm_bound = (b == Bound.COMPUTE) | (b == Bound.LATENCY)
        ratio[sm_bound] *= wave_factor(work.blocks[sm_bound], work.blocks_per_sm[sm_bound], origin.spec.sm_count.value,
                                       target.spec.sm_count.value)
    d = dur.astype(np.float64)
    floor = np.minimum(d, FLOOR_NS)
    new = floor + (d - floor) * ratio
    copies = b == Bound.HOST_COPY
    if copies.any():
        new[copies] = _host_copy(d[copies], work.bytes[copies], origin, target, notes)
    with np.errstate(invalid="ignore", divide="ignore"):
        applied = np.where(d > 0, new / np.maximum(d, 1), 1.0)
    return Scaled(dur=np.rint(new).astype(np.int64), ratio=applied, assumptions=tuple(dict.fromkeys(notes)))
