"""The model checked against measurements: the same workload recorded on two GPUs, each predicted from the other
and compared with what the other measured (run by benchmarks/predict_validation.py and the tests)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass

import numpy as np

from stepscope.analysis.costs import primary_device
from stepscope.analysis.facts import compute_facts
from stepscope.analysis.syncs import is_sync_api
from stepscope.hardware import HardwareTable
from stepscope.predict.gpus import roof_pair
from stepscope.predict.target import run_target, view
from stepscope.predict.work import gpu_work
from stepscope.trace.model import Kind, Trace
from stepscope.units import report_us as _us

MIN_CALLS = 5  # an op name needs this many calls in both traces to compare its speed


@dataclass(frozen=True)
class PairResult:
    workload: str
    origin: str  # table ids
    target: str
    origin_us: float  # step time measured on the origin
    measured_us: float  # step time measured on the target (its own trace)
    predicted_us: float  # predicted, host as measured on the origin (the model as used)
    host_speed: float  # how much faster the target session's host ran the same host ops
    host_matched_us: float  # predicted with that host speed (the GPU model alone, host difference taken out)
    gpu_measured_us: float  # GPU busy time per step on the target
    gpu_predicted_us: float
    origin_bottleneck: str | None
    measured_bottleneck: str | None
    predicted_bottleneck: str | None

    @property
    def error(self) -> float:
        return self.predicted_us / self.measured_us - 1

    @property
    def host_matched_error(self) -> float:
        return self.host_matched_us / self.measured_us - 1

    @property
    def gpu_error(self) -> float:
        return self.gpu_predicted_us / self.gpu_measured_us - 1

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "error": round(self.error, 4), "host_matched_error": round(self.host_matched_error, 4),
                "gpu_error": round(self.gpu_error, 4)}


def _host_durations(trace: Trace) -> dict[str, np.ndarray]:
    ev = trace.events
    rows = np.flatnonzero(ev.of_kind(Kind.CPU_OP, Kind.RUNTIME))
    by_name: dict[int, list[int]] = defaultdict(list)
    for name, dur in zip(ev.name[rows].tolist(), ev.dur[rows].tolist(), strict=True):
        by_name[name].append(dur)
    return {trace.strings[k]: np.asarray(v) for k, v in by_name.items()}


def host_speed(origin: Trace, target: Trace) -> float:
    """How many times as fast the target's host ran the host ops both traces have (the median of each op name's
    median-duration ratio, weighted by the origin's time in it; sync calls, which wait on the GPU, left out)."""
    a, b = _host_durations(origin), _host_durations(target)
    ratios, weights = [], []
    for name, da in a.items():
        db = b.get(name)
        if db is None or len(da) < MIN_CALLS or len(db) < MIN_CALLS or is_sync_api(name):
            continue
        if np.median(db) > 0:
            ratios.append(float(np.median(da) / np.median(db)))
            weights.append(float(da.sum()))
    if not ratios:
        return 1.0
    order = np.argsort(ratios)
    cumulative = np.cumsum(np.asarray(weights)[order])
    return float(np.asarray(ratios)[order][np.searchsorted(cumulative, cumulative[-1] / 2)])


def compare(workload: str, origin: Trace, target: Trace, table: HardwareTable) -> PairResult:
    """Predict `target`'s step from `origin`'s trace, with the host as measured and with the measured host speed."""
    fo, ft = compute_facts(origin), compute_facts(target)
    do, dt_ = primary_device(origin), primary_device(target)
    if do is None or dt_ is None:
        raise ValueError(f"{workload}: both traces need GPU activity")
    so = table.lookup(origin.meta.devices[0].name).spec  # type: ignore[union-attr]
    st = table.lookup(target.meta.devices[0].name).spec  # type: ignore[union-attr]
    ro, rt = roof_pair(so, st, table, origin.meta.devices[0].name, use_measured=False)
    work = gpu_work(origin, do, ro)
    plain = run_target(fo, do, work, ro, rt)
    speed = host_speed(origin, target)
    matched = run_target(fo, do, work, ro, rt, host_speed=speed)
    measured, predicted = view(ft, dt_), plain.view
    return PairResult(
        workload=workload, origin=so.id, target=st.id,
        origin_us=_us(fo.steps.duration.mean()), measured_us=_us(measured.step_ns), predicted_us=_us(predicted.step_ns),
        host_speed=round(speed, 3), host_matched_us=_us(matched.view.step_ns),
        gpu_measured_us=_us(measured.gpu_ns), gpu_predicted_us=_us(predicted.gpu_ns),
        origin_bottleneck=view(fo, do).bottleneck, measured_bottleneck=measured.bottleneck,
        predicted_bottleneck=predicted.bottleneck,
    )


def summary(results: list[PairResult]) -> dict[str, float]:
    def mean_abs(values: list[float]) -> float:
        return round(float(np.mean(np.abs(values))), 4) if values else 0.0

    input_bound = [r for r in results if r.origin_bottleneck == "input_bound"]
    return {
        "pairs": len(results),
        "step_error_mean": mean_abs([r.error for r in results]),
        "host_matched_error_mean": mean_abs([r.host_matched_error for r in results]),
        "gpu_time_error_mean": mean_abs([r.gpu_error for r in results]),
        "gpu_time_error_max": round(max((abs(r.gpu_error) for r in results), default=0.0), 4),
        "input_bound_error_max": round(max((abs(r.error) for r in input_bound), default=0.0), 4),
        "input_bound_host_matched_error_max": round(max((abs(r.host_matched_error) for r in input_bound),
                                                        default=0.0), 4),
        "bottleneck_agreement": round(float(np.mean([r.predicted_bottleneck == r.measured_bottleneck
                                                     for r in results])), 4) if results else 0.0,
    }
