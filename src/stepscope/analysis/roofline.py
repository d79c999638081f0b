"""Per kernel: achieved FLOP/s and bytes/s, arithmetic intensity, and where it sits against the roofs.

An op's FLOPs and bytes are shared among the kernels it launched in proportion to their time, so every
kernel of an op has the op's intensity. A kernel is latency-bound when it is too short to reach either roof
(under 10 µs on average: the launch-bound signal), else compute-bound at or right of the ridge point
(peak FLOP/s / bandwidth for its dtype) and memory-bound left of it. Kernels of ops without a formula are
uncovered: their time is reported as such, never counted as zero FLOPs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from stepscope.analysis.flops import FlopCount
from stepscope.analysis.kernels import SHORT_KERNEL_NS
from stepscope.trace.model import Trace

TOP_UNCOVERED = 8
ROOF_CLASSES = ("compute", "memory", "latency", "unknown")


@dataclass(frozen=True)
class Roofs:
    """Per-device rates the kernels are held against: dense peak FLOP/s per dtype and memory bytes/s."""

    peak_flops: Mapping[str, float]
    bandwidth: float | None
    achievable_flops: Mapping[str, float]
    achievable_bandwidth: float | None


@dataclass(frozen=True)
class KernelPoint:
    """One kernel name launched by one op, over all steps."""

    name: str
    op: str
    kind: str
    dtype: str
    count: int
    time_ns: int
    flops: float
    bytes: float
    roof: str  # compute | memory | latency | unknown (no peak for its dtype)
    roof_share: float | None  # achieved / the roof it is under (min(peak, intensity x bandwidth))

    @property
    def flop_rate(self) -> float:
        return self.flops / (self.time_ns * 1e-9) if self.time_ns else 0.0

    @property
    def byte_rate(self) -> float:
        return self.bytes / (self.time_ns * 1e-9) if self.time_ns else 0.0

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.bytes > 0 else None


@dataclass(frozen=True)
class RoofShare:
    """A roof class's share of kernel time, and how close its kernels come to their roof (time-weighted)."""

    roof: str
    share: float
    roof_share: float | None
    kind: str  # the op kind with most time in the class


@dataclass(frozen=True)
class Roofline:
    """The steps' kernels on the device's roofline, and the kernel time no formula covers."""

    points: tuple[KernelPoint, ...]  # most time first
    kernel_ns: int  # all kernel time in the steps
    covered_ns: int  # kernel time of ops with a formula
    uncovered: tuple[tuple[str, int], ...]  # (the op that launched it, kernel ns), most first
    classes: tuple[RoofShare, ...]  # of covered kernel time, largest first


def _roof(point_flops: float, point_bytes: float, time_ns: int, mean_ns: float, dtype: str,
          roofs: Roofs | None) -> tuple[str, float | None]:
    """(roof class, achieved / the roof it sits under): the compute peak right of the ridge, bandwidth left of
    it (a copy, with no FLOPs, is held against bandwidth alone)."""
    peak = roofs.peak_flops.get(dtype) if roofs is not None else None
    bandwidth = roofs.bandwidth if roofs is not None else None
    seconds = time_ns * 1e-9
    if seconds <= 0 or not bandwidth or point_bytes <= 0 or (peak is None and point_flops > 0):
        return ("latency" if mean_ns < SHORT_KERNEL_NS else "unknown"), None
    memory_side = point_flops <= 0 or peak is None or point_flops / point_bytes < peak / bandwidth
    share = (point_bytes / seconds / bandwidth) if memory_side else (point_flops / seconds / peak)
    if mean_ns < SHORT_KERNEL_NS:
        return "latency", share
    return ("memory" if memory_side else "compute"), share


def roofline(trace: Trace, counted: FlopCount, roofs: Roofs | None) -> Roofline | None:
    """The steps' kernels against the roofs; None for a trace without kernels."""
    kernels = counted.kernel_rows
    if len(kernels) == 0:
        return None
    ev = trace.events
    dur = ev.dur[kernels].astype(np.float64)
    op = counted.kernel_priced  # the innermost priced op around each launch
    covered = op >= 0
    op_time = np.bincount(op[covered], weights=dur[covered], minlength=len(counted.priced_rows))
    weight = np.zeros(len(kernels))
    weight[covered] = dur[covered] / np.maximum(op_time[op[covered]], 1.0)
    flops, moved = np.zeros(len(kernels)), np.zeros(len(kernels))
    flops[covered] = counted.priced_flops[op[covered]] * weight[covered]
    moved[covered] = np.nan_to_num(counted.priced_bytes[op[covered]]) * weight[covered]
    groups: dict[tuple[int, int], list[int]] = {}
    for i in np.flatnonzero(covered).tolist():
        groups.setdefault((int(ev.name[kernels[i]]), int(ev.name[counted.priced_rows[op[i]]])), []).append(i)
    points = []
    for (kname, oname), members in groups.items():
        idx = np.array(members)
        o = int(op[idx[0]])
        t, f, b = int(dur[idx].sum()), float(flops[idx].sum()), float(moved[idx].sum())
        dtype, kind = counted.priced_dtype[o], counted.priced_kind[o]
        roof, share = _roof(f, b, t, t / len(idx), dtype, roofs)
        points.append(KernelPoint(trace.strings[kname], trace.strings[oname], kind, dtype, len(idx), t, f, b,
                                  roof, share))
    points.sort(key=lambda p: -p.time_ns)
    return Roofline(points=tuple(points), kernel_ns=int(dur.sum()), covered_ns=int(dur[covered].sum()),
                    uncovered=_uncovered(trace, counted, dur), classes=_classes(points))


def _uncovered(trace: Trace, counted: FlopCount, dur: np.ndarray) -> tuple[tuple[str, int], ...]:
    """Uncovered kernel time by the op around the launch (by name), most first."""
    mask = counted.kernel_priced < 0
    launcher = counted.kernel_launcher[mask]
    named = launcher >= 0
    per_name = np.bincount(trace.events.name[launcher[named]], weights=dur[mask][named],
                           minlength=len(trace.strings)) if named.any() else np.zeros(0)
    ranked = [(trace.strings[i], float(per_name[i])) for i in np.argsort(-per_name)[:TOP_UNCOVERED]
              if per_name[i] > 0]
    unnamed = float(dur[mask][~named].sum())
    if unnamed > 0:
        ranked.append(("(no op recorded around the launch)", unnamed))
    ranked.sort(key=lambda kv: -kv[1])
    return tuple((name, int(ns)) for name, ns in ranked[:TOP_UNCOVERED])


def _classes(points: list[KernelPoint]) -> tuple[RoofShare, ...]:
    total = sum(p.time_ns for p in points)
    shares = []
    for roof in ROOF_CLASSES:
        mine = [p for p in points if p.roof == roof]
        t = sum(p.time_ns for p in mine)
        if not t:
            continue
        rated = [(p.roof_share, p.time_ns) for p in mine if p.roof_share is not None]
        rated_t = sum(w for _, w in rated)
        kinds: dict[str, int] = {}
        for p in mine:
            kinds[p.kind] = kinds.get(p.kind, 0) + p.time_ns
        shares.append(RoofShare(roof, t / total, sum(s * w for s, w in rated) / rated_t if rated_t else None,
                                max(kinds, key=kinds.__getitem__)))
    shares.sort(key=lambda s: -s.share)
    return tuple(shares)
