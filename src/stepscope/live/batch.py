"""The step, samples/s and peak memory at other batch sizes, predicted from one report: the step from the report's
own larger-batch estimate (the replay's what-if on a GPU, the advice's formula on a CPU: work that grows with the
batch and work that does not), the memory from the memory model (peak = fixed + per sample x batch)."""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.model.report import Report

PER_SAMPLE = ("activations", "temporaries")  # the memory categories that grow with the batch (analysis/headroom)
GROWS_WITH_BATCH = ("kernel", "memcpy", "memset", "cpu_exec", "dataloader")  # the fallback's per-sample parts
# The largest batch the page predicts or measures: far beyond any step that fits a device, small enough that every
# figure stays a finite float (a 400-digit batch overflowed the division below and ended watch).
MAX_BATCH = 10**7


@dataclass(frozen=True)
class BatchModel:
    batch_size: int
    step_us: float
    grow_us: float  # added to the step per extra batch's worth of samples (k - 1 times)
    step_basis: str  # where the growth comes from, in words
    fixed_bytes: int | None
    per_sample_bytes: float | None
    capacity_bytes: int | None  # the device's memory (None on a CPU)


@dataclass(frozen=True)
class BatchPrediction:
    batch_size: int
    step_us: float
    samples_per_s: float
    peak_bytes: int | None
    fits: bool | None  # None: the device's capacity is not known


def batch_model(report: Report) -> BatchModel | None:
    """None when the report has no step time or no batch size to scale from."""
    batch = _batch(report)
    step = report.summary.step_time_us
    if not batch or not step:
        return None
    rec = next((r for r in report.recommendations if r.id == "larger_batch" and r.estimated_speedup), None)
    factor = float((rec.evidence.get("batch_factor") if rec else None) or 2)
    if rec is not None and rec.estimated_speedup and factor > 1:
        # speedup = factor x step / new step  =>  new step = factor x step / speedup, linear in the factor
        grow = (factor * step / rec.estimated_speedup - step) / (factor - 1)
        basis = "the report's larger_batch estimate"
    else:
        parts = report.summary.breakdown_us
        total = sum(parts.values()) or 1.0
        grow = step * sum(parts.get(p, 0.0) for p in GROWS_WITH_BATCH) / total
        basis = "op, copy and loading time grow with the batch; the rest stays"
    fixed, per_sample, capacity = _memory(report, batch)
    return BatchModel(batch, step, max(grow, 0.0), basis, fixed, per_sample, capacity)


def batch_problem(batch: int) -> str | None:
    """Why `batch` is not a batch size to predict or measure, or None when it is one."""
    if not 1 <= batch <= MAX_BATCH:
        return f"the batch size must be a whole number from 1 to {MAX_BATCH:,}"
    return None


def predict(model: BatchModel, batch_size: int) -> BatchPrediction:
    if problem := batch_problem(batch_size):
        raise ValueError(problem)
    k = batch_size / model.batch_size
    step = max(model.step_us + (k - 1) * model.grow_us, 0.05 * model.step_us)  # a linear model, kept positive
    peak = (round(model.fixed_bytes + model.per_sample_bytes * batch_size)
            if model.fixed_bytes is not None and model.per_sample_bytes is not None else None)
    fits = peak <= model.capacity_bytes if peak is not None and model.capacity_bytes else None
    return BatchPrediction(batch_size, step, batch_size * 1e6 / step, peak, fits)


def _batch(report: Report) -> int | None:
    run = report.run
    if run is not None and (run.samples_per_step or run.batch_size):
        return run.samples_per_step or run.batch_size
    s = report.summary
    return round(s.samples_per_s / s.steps_per_s) if s.samples_per_s and s.steps_per_s else None


def _memory(report: Report, batch: int) -> tuple[int | None, float | None, int | None]:
    """Fixed bytes, bytes per sample and capacity: the headroom's when the report has it, else from the peak's
    categories (a CPU run has no device capacity to fit in)."""
    usage = report.memory_usage
    if usage is None or not usage.devices:
        return None, None, None
    device = max(usage.devices, key=lambda d: d.peak_allocated_bytes)
    if device.headroom is not None:
        room = device.headroom
        return room.fixed_bytes, room.per_sample_bytes, room.capacity_bytes
    per_sample = sum(c.bytes for c in device.categories if c.name in PER_SAMPLE) / batch
    fixed = device.peak_allocated_bytes - per_sample * batch
    capacity = report.device.total_memory_bytes if report.device and report.device.kind != "cpu" else None
    return round(fixed), per_sample, capacity
