"""The Report's `batch_sizes` section (model/batches.py): the step, samples/s and peak memory at other batch sizes,
from the report's own figures. The step from the report's `larger_batch` estimate (the replay's what-if on a GPU,
the advice's formula on a CPU: work that grows with the batch and work that does not), taken as linear in the
batch; without that estimate, op, copy and loading time grow with the batch and the rest stays. The memory from the
memory model: peak = fixed + per sample x batch (the headroom's, else the peak's categories)."""

from __future__ import annotations

from stepscope.model import report as s
from stepscope.model.batches import BatchRow, BatchSizes, at, batch_problem

FACTORS = (0.25, 0.5, 1, 2, 4, 8)  # the sizes shown, as multiples of the run's batch
PER_SAMPLE = ("activations", "temporaries")  # the memory categories that grow with the batch (analysis/headroom)
GROWS_WITH_BATCH = ("kernel", "memcpy", "memset", "cpu_exec", "dataloader")  # the fallback's per-sample parts


def batch_sizes(summary: s.Summary, recommendations: list[s.Recommendation], memory: s.MemoryUsage | None,
                device: s.Device | None) -> BatchSizes | None:
    """None when the report has no step time or no batch size to scale from."""
    batch, step = summary.batch_size, summary.step_time_us
    if not batch or not step:
        return None
    rec = next((r for r in recommendations if r.id == "larger_batch" and r.estimated_speedup), None)
    factor = _factor(rec)
    if rec is not None and rec.estimated_speedup and factor > 1:
        # speedup = factor x step / new step  =>  new step = factor x step / speedup, linear in the factor
        grow = (factor * step / rec.estimated_speedup - step) / (factor - 1)
        basis = "the report's larger_batch estimate"
    else:
        parts = summary.breakdown_us
        total = sum(parts.values()) or 1.0
        grow = step * sum(parts.get(p, 0.0) for p in GROWS_WITH_BATCH) / total
        basis = "op, copy and loading time grow with the batch; the rest stays"
    fixed, per_sample, capacity = _memory(memory, device, batch)
    model = BatchSizes(batch_size=batch, step_us=step, grow_us=round(max(grow, 0.0), 3), basis=basis,
                       fixed_bytes=fixed, per_sample_bytes=per_sample, capacity_bytes=capacity, rows=[])
    sizes = sorted(b for b in {max(1, round(batch * f)) for f in FACTORS} if batch_problem(b) is None)
    rows = [_current(at(model, batch), summary) if b == batch else at(model, b) for b in sizes]
    return BatchSizes(batch_size=batch, step_us=step, grow_us=model.grow_us, basis=basis, fixed_bytes=fixed,
                      per_sample_bytes=per_sample, capacity_bytes=capacity, rows=rows)


def _current(row: BatchRow, summary: s.Summary) -> BatchRow:
    """The run's own batch: the headline's step and samples/s, as the summary says them."""
    return BatchRow(batch_size=row.batch_size, step_us=summary.step_time_us or row.step_us,
                    samples_per_s=summary.samples_per_s or row.samples_per_s, peak_bytes=row.peak_bytes,
                    fits=row.fits, current=True)


def _factor(rec: s.Recommendation | None) -> float:
    """The batch factor the larger_batch estimate is for (its evidence), 2 when it does not say."""
    evidence = rec.evidence if rec is not None else None
    value = evidence.get("batch_factor") if isinstance(evidence, dict) else getattr(evidence, "batch_factor", None)
    return float(value or 2)


def _memory(usage: s.MemoryUsage | None, device: s.Device | None,
            batch: int) -> tuple[int | None, float | None, int | None]:
    """Fixed bytes, bytes per sample and capacity: the headroom's when the report has it, else from the peak's
    categories (a CPU run has no device capacity to fit in)."""
    if usage is None or not usage.devices:
        return None, None, None
    top = max(usage.devices, key=lambda d: d.peak_allocated_bytes)
    if top.headroom is not None:
        room = top.headroom
        return room.fixed_bytes, room.per_sample_bytes, room.capacity_bytes
    per_sample = sum(c.bytes for c in top.categories if c.name in PER_SAMPLE) / batch
    fixed = top.peak_allocated_bytes - per_sample * batch
    capacity = device.total_memory_bytes if device is not None and device.kind != "cpu" else None
    return round(fixed), per_sample, capacity
