"""What the step meter says of the job (model/meter.py's record -> the report's `meter` section): the headline step
from the steps before any profiler touched the process (all of them when none did), its spread, the phases that add
up to it, whether the process ran differently after the profiler, and the DataLoader workers' side.

The program's first step (start-up: imports, allocations, autotuning) is never in the headline."""

from __future__ import annotations

import numpy as np

from stepscope.model import report as s
from stepscope.model.meter import PHASES, Meter, MeterPhase, MeterRecord, MeterWorkers

MIN_STEPS = 2  # steps the headline needs
# The process 'runs differently after the profiler' when its mean step moved by more than this, and by more than
# twice the steps' own spread (the half-range of their middle 80%).
CHANGED_AFTER = 0.08


def meter_section(record: MeterRecord | None) -> Meter | None:
    """The report's meter section; None when the meter measured fewer than MIN_STEPS steps past the first."""
    if record is None:
        return None
    st = record.steps
    wall = np.asarray(st.wall_ns, dtype=np.float64)
    n = len(wall)
    index = np.arange(st.first_step, st.first_step + n)
    usable = index >= 1  # the program's first step pays for start-up
    if record.profiled is not None:
        first, last = record.profiled
        before = usable & (index < first)
        after = index > last + 1  # the first step after the profiler pays for its export and freed memory
        basis = "before the profiler"
        if before.sum() < MIN_STEPS:
            before, basis = after, "after the profiler (too few steps before it)"
    else:
        before, after, basis = usable, np.zeros(n, dtype=bool), "no profiler ran"
    if before.sum() < MIN_STEPS:
        return None
    chosen = wall[before]
    step = float(chosen.mean())
    phases = _phases(record, before, step)
    after_mean = float(wall[after].mean()) if after.sum() >= MIN_STEPS and basis == "before the profiler" else None
    first_step = float(wall[index == 0][0]) if (index == 0).any() else None
    device = np.asarray(st.device_ns, dtype=np.float64) if len(st.device_ns) == n else None
    device_known = device[before] if device is not None else None
    device_us = (float(device_known[device_known >= 0].mean()) / 1e3
                 if device_known is not None and (device_known >= 0).sum() >= MIN_STEPS else None)
    end = np.asarray(st.end_ns, dtype=np.float64)
    return Meter(
        source=record.source, steps_measured=st.first_step + n + record.overflow_steps, basis=basis,
        steps=int(before.sum()), step_us=_us(step), median_us=_us(float(np.median(chosen))),
        p10_us=_us(float(np.percentile(chosen, 10))), p90_us=_us(float(np.percentile(chosen, 90))),
        phases=phases, first_step_us=_us(first_step) if first_step is not None else None,
        device_step_us=round(device_us, 3) if device_us is not None else None,
        after_step_us=_us(after_mean) if after_mean is not None else None, after_steps=int(after.sum()),
        changed_after=_changed(chosen, after_mean),
        workers=_workers(record, end[before] - wall[before], end[before]),
        num_workers=record.num_workers, cpu_cores=record.cpu_cores,
        samples_per_s=round(record.batch_size * 1e9 / step, 2) if record.batch_size and step > 0 else None)


def _us(ns: float) -> float:
    return round(ns / 1e3, 3)


def _phases(record: MeterRecord, chosen: np.ndarray, step: float) -> list[MeterPhase]:
    """Each phase's mean over the chosen steps; `other` is what is left, so they add up to the step."""
    means = {p: float(np.asarray(getattr(record.steps, f"{p}_ns"), dtype=np.float64)[chosen].mean()) for p in PHASES}
    means["other"] = max(step - sum(means.values()), 0.0)
    return [MeterPhase(name=p, mean_us=_us(v), share=round(v / step, 4) if step > 0 else 0.0)
            for p, v in means.items()]


def _changed(before: np.ndarray, after_mean: float | None) -> float | None:
    """after / before - 1 when the move is beyond CHANGED_AFTER and beyond twice the steps' own spread."""
    if after_mean is None or len(before) < MIN_STEPS:
        return None
    mean = float(before.mean())
    spread = float(np.percentile(before, 90) - np.percentile(before, 10)) / 2 / mean if mean > 0 else 0.0
    change = after_mean / mean - 1 if mean > 0 else 0.0
    return round(change, 4) if abs(change) > max(CHANGED_AFTER, 2 * spread) else None


def _workers(record: MeterRecord, starts: np.ndarray, ends: np.ndarray) -> MeterWorkers | None:
    """The workers' batches made while the chosen steps ran."""
    w = record.workers
    if w is None or not w.ready_ns or not len(starts):
        return None
    lo, hi = int(starts.min()), int(ends.max())
    if hi <= lo:
        return None
    start, ready = np.asarray(w.start_ns, dtype=np.int64), np.asarray(w.ready_ns, dtype=np.int64)
    cpu = np.asarray(w.cpu_ns, dtype=np.int64) if len(w.cpu_ns) == len(start) else None
    inside = (ready > lo) & (start < hi)
    if not inside.any():
        return None
    wall = (np.minimum(ready, hi) - np.maximum(start, lo))[inside]
    batch = (ready - start)[inside]
    workers = len(set(np.asarray(w.worker_id)[inside].tolist()))
    return MeterWorkers(workers=workers, batches=int(inside.sum()), batch_us=_us(float(batch.mean())),
                        batch_cpu_us=_us(float(cpu[inside].mean())) if cpu is not None else None,
                        busy_share=round(float(wall.sum()) / (max(workers, 1) * (hi - lo)), 4))


def meter_reference(meter: Meter, record: MeterRecord) -> s.Reference:
    """The meter's headline as the run's reference (the unprofiled step the replay is checked against)."""
    values = [v / 1e3 for v in _chosen_walls(record, meter)]
    return s.Reference(method="step meter", step_us=meter.step_us, values_us=[round(v, 3) for v in values],
                       steps=meter.steps, noise=max(round((meter.p90_us - meter.p10_us) / 2 / meter.step_us, 4), 0.02)
                       if meter.step_us > 0 else 0.02)


def _chosen_walls(record: MeterRecord, meter: Meter) -> list[float]:
    st = record.steps
    index = range(st.first_step, st.first_step + len(st.wall_ns))
    if meter.basis == "before the profiler" and record.profiled is not None:
        return [float(w) for i, w in zip(index, st.wall_ns, strict=True) if 1 <= i < record.profiled[0]]
    if record.profiled is not None:
        return [float(w) for i, w in zip(index, st.wall_ns, strict=True) if i > record.profiled[1] + 1]
    return [float(w) for i, w in zip(index, st.wall_ns, strict=True) if i >= 1]
