"""What the step meter says of the job (model/meter.py's record -> the report's `meter` section): the headline step
from the steps before any profiler touched the process (all of them when none did), its spread, the phases that add
up to it, whether the process ran differently after the profiler, and the DataLoader workers' side.

The first steps pay for start-up (imports, allocations, autotuning) and ride on batches prefetched before the loop:
the program's first step, and the first fifth of the steps before the profiler, are never in the headline. On a GPU
whose device timed the steps (CUDA events) the headline is the device's step: the host may run steps ahead of it
while the launch queue fills."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.advice.rules.dataloader import RESTART_RATIO
from stepscope.analysis.facts import Facts
from stepscope.analysis.time_by_line import PHASE_RANGES
from stepscope.model import report as s
from stepscope.model.meter import DEVICE_PHASES, PHASES, Meter, MeterPhase, MeterRecord, MeterWorkers
from stepscope.stats import spread, step_noise, warming
from stepscope.trace.intervals import coverage, union
from stepscope.units import report_us

MIN_STEPS = 2  # steps the headline needs
WARMUP_FRACTION = 5
# The process 'runs differently after the profiler' when its mean step moved by more than this, and by more than
# twice the steps' own spread (stats.spread).
CHANGED_AFTER = 0.08
# A step over STALL times the headline's median is a one-off stall (the first full garbage collection after the
# imports, a lazy initialisation: start-up) when there is at most one in STALL_RARITY of them: left out and said. A
# 1 ms step's headline stands on ~10 steps, where one 5 ms collection would weigh as if it came every tenth step.
STALL = 3.0
STALL_RARITY = 8
BEFORE, NONE_RAN, AFTER = "before the profiler", "no profiler ran", "after the profiler (too few steps before it)"


@dataclass(frozen=True)
class Selection:
    """Which of the record's steps the headline stands on, and which came after the profiler."""

    headline: np.ndarray  # bool per step
    after: np.ndarray
    basis: str
    values: np.ndarray  # the headline steps' times (ns): the device's on a GPU that timed them, else wall
    on_device: bool
    warming_left_out: int = 0  # steps before them still getting faster, left out
    stalls_ns: tuple[float, ...] = ()  # one-off stalls among them, left out


def select(record: MeterRecord) -> Selection | None:
    st = record.steps
    wall = np.asarray(st.wall_ns, dtype=np.float64)
    n = len(wall)
    index = np.arange(st.first_step, st.first_step + n)
    after = np.zeros(n, dtype=bool)
    if record.profiled is not None:
        first, last = record.profiled
        headline = (index < first) & (index >= max(1, first // WARMUP_FRACTION))
        after = index > last + 1  # the first step after the profiler pays for its export and the memory it freed
        basis = BEFORE
        if headline.sum() < MIN_STEPS:
            headline, after, basis = after, np.zeros(n, dtype=bool), AFTER
    else:
        headline, basis = index >= 1, NONE_RAN
    device = np.asarray(st.device_ns, dtype=np.float64) if len(st.device_ns) == n else None
    on_device = device is not None and int((headline & (device >= 0)).sum()) >= MIN_STEPS
    if on_device:
        assert device is not None
        headline = headline & (device >= 0)
    if headline.sum() < MIN_STEPS:
        return None
    times = device if on_device and device is not None else wall
    headline, left_out, stalls = _steady(headline, times)
    return Selection(headline, after, basis, times[headline], on_device, left_out, stalls)


def _steady(headline: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, int, tuple[float, ...]]:
    """The headline's steps less a first half still warming up (stats.warming), as often as it is, and less one-off
    stalls: the job's step is its steady one. Returns the steps kept, how many warming steps were left out, and the
    stalls' times."""
    index = np.flatnonzero(headline)
    while len(index) >= 4 * MIN_STEPS and _warming(times[index]) is not None:
        index = index[len(index) // 2:]
    warming = int(headline.sum()) - len(index)
    stalled = times[index] > STALL * float(np.median(times[index]))
    stalls = tuple(float(t) for t in times[index][stalled])
    if stalls and len(stalls) * STALL_RARITY <= len(index):
        index = index[~stalled]
    else:
        stalls = ()
    steady = np.zeros(len(headline), dtype=bool)
    steady[index] = True
    return steady, warming, stalls


def meter_section(record: MeterRecord | None) -> Meter | None:
    """The report's meter section; None when the meter has fewer than MIN_STEPS steps to stand on."""
    found = measured(record)
    return found[0] if found is not None else None


def measured(record: MeterRecord | None) -> tuple[Meter, s.Reference] | None:
    """The report's meter section and the run's reference it makes (the unprofiled step the replay is checked
    against), from one choice of steps; None when the meter has fewer than MIN_STEPS steps to stand on."""
    chosen = select(record) if record is not None else None
    if record is None or chosen is None:
        return None
    meter = _section(record, chosen)
    values = [float(v) for v in chosen.values]
    reference = s.Reference(method="step meter", step_us=meter.step_us, steps=meter.steps,
                            values_us=[report_us(v) for v in values], noise=round(step_noise(values), 4))
    return meter, reference


def _section(record: MeterRecord, chosen: Selection) -> Meter:
    st = record.steps
    wall = np.asarray(st.wall_ns, dtype=np.float64)
    end = np.asarray(st.end_ns, dtype=np.float64)
    step = float(chosen.values.mean())
    after_mean = float(wall[chosen.after].mean()) if chosen.after.sum() >= MIN_STEPS else None
    first_step = float(wall[0]) if st.first_step == 0 and len(wall) else None
    h = chosen.headline
    span = (float((end[h] - wall[h]).min()), float(end[h].max())) if h.any() else None
    others = _others(record, *span) if span is not None else (None, None)
    return Meter(
        source=record.source, steps_measured=st.first_step + len(wall) + record.overflow_steps, basis=chosen.basis,
        steps=int(h.sum()), step_us=report_us(step), median_us=report_us(float(np.median(chosen.values))),
        p10_us=report_us(float(np.percentile(chosen.values, 10))),
        p90_us=report_us(float(np.percentile(chosen.values, 90))),
        phases=_phases(record, h, step), first_step_us=report_us(first_step) if first_step is not None else None,
        device_step_us=report_us(step) if chosen.on_device else None,
        device_phases=_device_phases(record, chosen, step), device_busy=_busy(record, end[h] - wall[h], end[h]),
        after_step_us=report_us(after_mean) if after_mean is not None else None,
        after_steps=int(chosen.after.sum()),
        changed_after=_changed(wall[h], after_mean), warming=_warming(chosen.values),
        others_cores_before=others[0], others_cores_after=others[1],
        warming_left_out=chosen.warming_left_out,
        stalls_us=[report_us(t) for t in chosen.stalls_ns] or None,
        workers=_workers(record, end[h] - wall[h], end[h]),
        process_cpu_us=_process_cpu_us(record, *span, step) if span is not None else None,
        restart_waits_us=_restart_waits(record, h),
        num_workers=record.num_workers, cpu_cores=record.cpu_cores,
        samples_per_s=round(record.batch_size * 1e9 / step, 2) if record.batch_size and step > 0 else None)


def _restart_waits(record: MeterRecord, headline: np.ndarray) -> list[float] | None:
    """The data waits far above the others, less their median, from the headline's first step to its last (the
    stalls left out of it included): where the DataLoader's workers started again. Far above: RESTART_RATIO times
    the median wait, or most of a stalled step (STALL times the median step) spent waiting for data, as in an
    input-bound loader whose every batch waits. None: no such wait."""
    kept = np.flatnonzero(headline)
    if not len(kept):
        return None
    cut = slice(kept[0], kept[-1] + 1)
    data = np.asarray(record.steps.data_ns[cut], dtype=np.float64)
    wall = np.asarray(record.steps.wall_ns[cut], dtype=np.float64)
    median, step = float(np.median(data)), float(np.median(wall))
    stalled_on_data = (wall > STALL * step) & (data - median > 0.5 * (wall - step))
    long = data[(data > RESTART_RATIO * max(median, 1e3)) | stalled_on_data]
    return [report_us(float(v) - median) for v in long] or None


def _cores(readings: list[list[float]], start_ns: float, end_ns: float) -> tuple[float, float] | None:
    """(this process's, the other processes') busy cores on average between `start_ns` and `end_ns` (host clock),
    from the meter's [ns, this process's CPU s, the machine's busy CPU s] readings: the last one at or before the
    start to the first at or after the end; None without two such readings or over less than half a second (the
    counters tick every 10 ms)."""
    before = [r for r in readings if r[0] <= start_ns]
    after = [r for r in readings if r[0] >= end_ns]
    if not before or not after:
        return None
    a, b = before[-1], after[0]
    seconds = (b[0] - a[0]) / 1e9
    if seconds < 0.5:
        return None
    own = max(b[1] - a[1], 0.0)
    return own / seconds, max((b[2] - a[2]) - own, 0.0) / seconds


def _others_cores(readings: list[list[float]], start_ns: float, end_ns: float) -> float | None:
    found = _cores(readings, start_ns, end_ns)
    return found[1] if found is not None else None


def _process_cpu_us(record: MeterRecord, start_ns: float, end_ns: float, step_ns: float) -> float | None:
    """This process's CPU time per step over the headline's steps (all its threads: the main thread's work, its
    intra-op threads, a fetch in the main process), from the once-a-second readings; None where they are too few."""
    found = _cores(record.host_cpu, start_ns, end_ns) if record.host_cpu else None
    return report_us(found[0] * step_ns) if found is not None else None


def _others(record: MeterRecord, start_ns: float, end_ns: float) -> tuple[float | None, float | None]:
    """Other processes' busy cores over the headline's steps (`start_ns` to `end_ns`) and from the profiler's start
    to the program's end; both None when no profiler ran (nothing to compare)."""
    if not record.profiled_spans or not record.host_cpu:
        return None, None
    before = _others_cores(record.host_cpu, start_ns, end_ns)
    after = _others_cores(record.host_cpu, record.profiled_spans[0][0], record.host_cpu[-1][0])
    return (round(before, 2) if before is not None else None, round(after, 2) if after is not None else None)


def _phases(record: MeterRecord, chosen: np.ndarray, step: float) -> list[MeterPhase]:
    """Each phase's mean over the chosen steps; `other` is what is left of `step` (the host's wall time, or on a GPU
    the device's step, which the host's phases fit in), so they add up to the step."""
    means = {p: float(np.asarray(getattr(record.steps, f"{p}_ns"), dtype=np.float64)[chosen].mean()) for p in PHASES}
    means["other"] = max(step - sum(means.values()), 0.0)
    return [MeterPhase(name=p, mean_us=report_us(v), share=round(v / step, 4) if step > 0 else 0.0)
            for p, v in means.items()]


def _device_phases(record: MeterRecord, chosen: Selection, step: float) -> list[MeterPhase] | None:
    """The device's step split where the host entered the forward, backward and optimizer (capture/meter/device.py),
    over the headline's steps; `other` is the rest of the device's step, so they add up to it."""
    st = record.steps
    columns = [np.asarray(getattr(st, f"device_{p}_ns"), dtype=np.float64) for p in DEVICE_PHASES]
    if not chosen.on_device or any(len(c) != len(st.wall_ns) for c in columns):
        return None
    h = chosen.headline  # steps with a device time; a phase figure missing (-1) leaves the split out
    if any((c[h] < 0).any() for c in columns):
        return None
    means = {p: float(c[h].mean()) for p, c in zip(DEVICE_PHASES, columns, strict=True)}
    means["other"] = max(step - sum(means.values()), 0.0)
    return [MeterPhase(name=p, mean_us=report_us(v), share=round(v / step, 4) if step > 0 else 0.0)
            for p, v in means.items()]


def _busy(record: MeterRecord, starts: np.ndarray, ends: np.ndarray) -> float | None:
    """NVML's busy share over the headline's span: the readings taken inside it (each covers the second before)."""
    if not record.device_busy or not len(ends):
        return None
    inside = [pct for t, pct in record.device_busy if starts.min() < t <= ends.max()]
    return round(float(np.mean(inside)) / 100, 4) if inside else None


def _changed(before: np.ndarray, after_mean: float | None) -> float | None:
    """after / before - 1 when the move is beyond CHANGED_AFTER and beyond twice the steps' own spread."""
    if after_mean is None or len(before) < MIN_STEPS:
        return None
    mean = float(before.mean())
    if mean <= 0:
        return None
    change = after_mean / mean - 1
    return round(change, 4) if abs(change) > max(CHANGED_AFTER, 2 * spread(before.tolist())) else None


def _warming(values: np.ndarray) -> float | None:
    """The headline's first half over its second - 1 when still getting faster (stats.warming). A first half left
    out wrongly costs only steps; one kept wrongly biases the headline (1 ms steps still settling over their first
    dozen put it 8% above the plain step)."""
    n = len(values) // 2
    return warming(values[:n].tolist(), values[-n:].tolist()) if n >= 2 else None


def _workers(record: MeterRecord, starts: np.ndarray, ends: np.ndarray) -> MeterWorkers | None:
    """The workers' batches made while the chosen steps ran."""
    w = record.workers
    if w is None or not w.ready_ns or not len(starts):
        return None
    lo, hi = int(starts.min()), int(ends.max())
    start, ready = np.asarray(w.start_ns, dtype=np.int64), np.asarray(w.ready_ns, dtype=np.int64)
    cpu = np.asarray(w.cpu_ns, dtype=np.int64) if len(w.cpu_ns) == len(start) else None
    inside = (ready > lo) & (start < hi)
    if hi <= lo or not inside.any():
        return None
    busy = (np.minimum(ready, hi) - np.maximum(start, lo))[inside]
    workers = len(set(np.asarray(w.worker_id)[inside].tolist()))
    return MeterWorkers(workers=workers, batches=int(inside.sum()),
                        batch_us=report_us(float((ready - start)[inside].mean())),
                        batch_cpu_us=report_us(float(cpu[inside].mean())) if cpu is not None else None,
                        busy_share=round(float(busy.sum()) / (max(workers, 1) * (hi - lo)), 4))


# What the replayed timeline can say of each meter phase: the host ranges torch records around a DataLoader fetch and an
# optimizer step; the rest of the step is everything else (forward, backward, sync and the loop's own work together).


def replay_phases(facts: Facts, meter: Meter) -> dict[str, dict[str, float | None]]:
    """The replayed (or recorded) timeline's mean step split like the meter's, each part against the meter's."""
    steps, trace = facts.steps, facts.trace
    if not len(steps):
        return {}
    replayed_step = float(steps.duration.mean())
    parts: dict[str, float] = {}
    for phase, prefixes in PHASE_RANGES.items():
        rows = trace.names_where(lambda name, p=prefixes: name.startswith(p))
        covered = union(trace.events.start[rows], trace.events.end[rows])
        parts[phase] = float(coverage(covered, steps.start, steps.end).mean()) if rows.any() else 0.0
    parts["rest"] = max(replayed_step - sum(parts.values()), 0.0)
    measured = {name: meter.phase_us(name) * 1e3 for name in PHASE_RANGES}
    measured["rest"] = max(meter.step_us * 1e3 - sum(measured.values()), 0.0)
    step_ns = meter.step_us * 1e3
    return {phase: {"replayed": report_us(parts[phase]), "measured": report_us(measured[phase]),
                    "error": round(parts[phase] / measured[phase] - 1, 4)
                    if measured[phase] >= 0.01 * step_ns and measured[phase] > 0 else None}
            for phase in ("data", "optimizer", "rest")}
