"""How much of the machine the steps use: model FLOPs per step, MFU against the device's dense peak for the
dtype the math ran in (the hardware table's row and source), HFU when recomputation is seen, and the
kernels against the roofline. On a CPU-only run: FLOPs and GFLOP/s, and MFU only against a CPU peak the
run's census allows to estimate (threads x clock x FMA width), labelled an estimate.

MFU = model FLOPs per step / (step time x dense peak x devices); with several dtypes, the time each dtype's
FLOPs need at its own peak is summed (so one dtype gives exactly the textbook ratio).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.flops import FlopCount, host_step
from stepscope.analysis.hostops import count_inside, outermost
from stepscope.analysis.roofline import TOP_UNCOVERED, Roofline, Roofs, roofline
from stepscope.analysis.steps import Steps
from stepscope.hardware import GpuMatch, HardwareTable, achievable_for, load_table
from stepscope.trace.census import CpuInfo, RunCensus
from stepscope.trace.model import Kind, Trace, distinct

# FP32 FLOPs per cycle per core: 2 FMA units x SIMD lanes x 2 (an assumption said with the estimate).
CPU_FP32_PER_CYCLE = {"avx512": 64, "avx2": 32, "neon": 16}


@dataclass(frozen=True)
class PeakUsed:
    """The peak MFU divides by, and where it comes from."""

    dtype: str
    flops_per_s: float  # dense, per device
    source: str  # the source's id in the hardware table
    document: str  # its title
    url: str | None
    achievable: float | None  # measured on this device, per device
    achievable_origin: str | None


@dataclass(frozen=True)
class CpuPeak:
    """The host's peak FLOP rate, and how it was reckoned."""

    flops_per_s: float
    how: str  # "8 threads x 3.50 GHz x 64 FP32 FLOPs/cycle (AVX-512: 2 FMA units assumed)"


@dataclass(frozen=True)
class Utilization:
    """How much of the device's peak the steps use (MFU), and what that rests on."""

    device: str  # the device name as the trace gives it ("CPU" on a CPU-only trace)
    spec: GpuMatch | None  # the hardware table's row for it
    devices: int
    steps: int
    step_ns: float  # mean
    forward_flops: float  # model FLOPs per step
    backward_flops: float
    recompute_flops: float  # forward work run again in the backward (per step)
    flops_by_dtype: dict[str, float]  # model FLOPs per step by the math's dtype (recompute excluded)
    mfu: float | None
    hfu: float | None  # only when recomputation is seen
    mfu_of_achievable: float | None  # against the measured achievable rates, when measured
    why_no_mfu: str | None
    peaks: tuple[PeakUsed, ...]
    cpu_peak: CpuPeak | None
    shapes_recorded: bool
    covered_share: float | None  # of kernel time (GPU) or op time (CPU): ops with a formula
    uncovered: tuple[tuple[str, int], ...]  # (op, ns per step)
    roofline: Roofline | None
    roofs: Roofs | None
    bandwidth_source: str | None

    @property
    def model_flops(self) -> float:
        return self.forward_flops + self.backward_flops

    @property
    def achieved_flops_per_s(self) -> float:
        return self.model_flops / (self.step_ns * 1e-9) / self.devices if self.step_ns else 0.0


def _device(trace: Trace) -> tuple[str, int | None, int]:
    """(name, SM count, devices with kernels) of the trace's GPU, or ('CPU', None, 1)."""
    ev = trace.events
    used = distinct(ev.device[trace.is_gpu_activity]) if trace.has_device_events else np.zeros(0, int)
    if len(used) == 0:
        return "CPU", None, 1
    info = next((d for d in trace.meta.devices if d.id == int(used[0])), None) or (
        trace.meta.devices[0] if trace.meta.devices else None)
    return (info.name, info.sm_count, len(used)) if info else ("unknown GPU", None, len(used))


def _peaks(table: HardwareTable, match: GpuMatch, device: str, dtypes: list[str]) -> tuple[list[PeakUsed], str | None]:
    spec, measured = match.spec, achievable_for(device)
    found, missing = [], []
    for dtype in dtypes:
        rate = spec.peak_flops(dtype)
        if rate is None:
            missing.append(dtype)
            continue
        peak = spec.peak(dtype)
        source = table.sources.get(peak.source or "")
        found.append(PeakUsed(dtype, rate, peak.source or "", source.title if source else "", source.url if source
                              else None, measured.flops(dtype) if measured else None,
                              measured.origin if measured else None))
    why = (f"the hardware table has no dense {', '.join(missing)} peak for the {spec.name}" if missing else None)
    return found, why


def _ratio(by_dtype: dict[str, float], rates: dict[str, float], seconds: float) -> float | None:
    if not by_dtype or seconds <= 0 or any(rates.get(d) is None for d in by_dtype):
        return None
    return sum(f / rates[d] for d, f in by_dtype.items()) / seconds


def cpu_peak(cpu: CpuInfo | None) -> CpuPeak | None:
    if cpu is None or not cpu.max_mhz or cpu.simd not in CPU_FP32_PER_CYCLE:
        return None
    per_cycle = CPU_FP32_PER_CYCLE[cpu.simd]
    how = (f"{cpu.threads} threads x {cpu.max_mhz / 1000:.2f} GHz x {per_cycle} FP32 FLOPs/cycle "
           f"({cpu.simd.upper()} with 2 FMA units assumed)")
    return CpuPeak(cpu.threads * cpu.max_mhz * 1e6 * per_cycle, how)


def _per_step(counted: FlopCount, steps: int, mask: np.ndarray) -> float:
    return float(counted.flops[mask].sum() / steps) if steps else 0.0


def _coverage(trace: Trace, steps: Steps, counted: FlopCount, line: Roofline | None) -> tuple[float | None, tuple]:
    """The share of the work the formulas cover, and the uncovered ops by time per step: kernel time on a GPU;
    on a CPU-only trace, the time of the outermost ops (those with no counted op inside are uncovered)."""
    n = max(len(steps), 1)
    if line is not None:
        share = line.covered_ns / line.kernel_ns if line.kernel_ns else None
        return share, tuple((name, ns // n) for name, ns in line.uncovered)
    ev = trace.events
    ops = np.flatnonzero(ev.kind == Kind.CPU_OP)
    top = outermost(trace, ops[host_step(ev.start[ops], steps) >= 0])
    if len(top) == 0:
        return None, ()
    holds = count_inside(trace, top, counted.rows) > 0
    total = float(ev.dur[top].sum())
    names: dict[str, int] = {}
    for row in top[~holds].tolist():
        names[trace.name_of(row)] = names.get(trace.name_of(row), 0) + int(ev.dur[row])
    ranked = sorted(names.items(), key=lambda kv: -kv[1])[:TOP_UNCOVERED]
    return (float(ev.dur[top[holds]].sum()) / total if total else None), tuple((k, v // n) for k, v in ranked)


def utilization(trace: Trace, steps: Steps, counted: FlopCount, census: RunCensus | None = None,
                table: HardwareTable | None = None) -> Utilization | None:
    """None when the trace has no step or no op with a formula (nothing to say but that, which the report says
    from the FLOP count itself)."""
    n = len(steps)
    if n == 0:
        return None
    name, sm_count, devices = _device(trace)
    model = counted.model & (counted.step >= 0)
    by_dtype: dict[str, float] = {}
    fresh = model & ~counted.recompute
    for i in np.flatnonzero(fresh).tolist():
        by_dtype[counted.dtype[i]] = by_dtype.get(counted.dtype[i], 0.0) + float(counted.flops[i]) / n
    seconds = float(steps.duration.mean()) * 1e-9
    peaks: list[PeakUsed] = []
    match, why, roofs, cpu = None, None, None, None
    if name == "CPU":
        cpu = cpu_peak(census.cpu if census else None)
        rates = {"fp32": cpu.flops_per_s} if cpu else {}
        why = None if cpu else "no CPU peak is known (a run under stepscope run records the CPU to estimate one)"
    else:
        table = table or load_table()
        match = table.lookup(name, sm_count)
        if match is None:
            why = f"'{name}' is not in the hardware table (add it in your hardware file: docs/hardware.md)"
        else:
            peaks, why = _peaks(table, match, name, sorted(by_dtype))
            roofs = _roofs(match, name)
        rates = {p.dtype: p.flops_per_s for p in peaks}
    line = roofline(trace, counted, roofs)
    recompute = _per_step(counted, n, model & counted.recompute)
    mfu = _ratio(by_dtype, rates, seconds * devices)
    with_recompute = dict(by_dtype)
    for i in np.flatnonzero(model & counted.recompute).tolist():
        with_recompute[counted.dtype[i]] = with_recompute.get(counted.dtype[i], 0.0) + float(counted.flops[i]) / n
    achievable = {p.dtype: p.achievable for p in peaks if p.achievable}
    share, uncovered = _coverage(trace, steps, counted, line)
    return Utilization(
        device=name, spec=match, devices=devices, steps=n, step_ns=float(steps.duration.mean()),
        forward_flops=_per_step(counted, n, fresh & ~counted.backward),
        backward_flops=_per_step(counted, n, fresh & counted.backward),
        recompute_flops=recompute, flops_by_dtype=by_dtype,
        mfu=mfu, hfu=_ratio(with_recompute, rates, seconds * devices) if recompute else None,
        mfu_of_achievable=_ratio(by_dtype, achievable, seconds * devices) if achievable else None,
        why_no_mfu=None if mfu is not None else (why or _why_no_flops(counted, by_dtype)),
        peaks=tuple(peaks), cpu_peak=cpu, shapes_recorded=counted.shapes_recorded, covered_share=share,
        uncovered=uncovered, roofline=line, roofs=roofs,
        bandwidth_source=match.spec.memory_bandwidth_gbs.source if match else None,
    )


def _why_no_flops(counted: FlopCount, by_dtype: dict[str, float]) -> str | None:
    if by_dtype:
        return None
    if not counted.shapes_recorded:
        return ("the trace has no op input shapes to count FLOPs from (profile with record_shapes=True; "
                "stepscope run records them)")
    return "no matrix product, convolution or attention was counted in the steps"


def _roofs(match: GpuMatch, device: str) -> Roofs:
    spec, measured = match.spec, achievable_for(device)
    peaks = {d: spec.peak_flops(d) for d in spec.peaks}
    return Roofs(peak_flops={d: v for d, v in peaks.items() if v is not None}, bandwidth=spec.memory_bandwidth(),
                 achievable_flops=dict(measured.flops_per_s) if measured else {},
                 achievable_bandwidth=measured.memory_bytes_per_s if measured else None)
