"""The Report's `batch_sizes` section: the step, samples/s and peak memory at other batch sizes, predicted once by
the pipeline (pipeline/batch_sizes.py) from the report's own figures, and the linear model they come from. The
watch page shows the rows as they are; its batch box asks `at` for a size the rows do not have: the one formula,
beside the data it reads, so the box and the rows cannot disagree."""

from __future__ import annotations

import msgspec

# The largest batch a prediction or a measurement takes: far beyond any step that fits a device, small enough that
# every figure stays a finite float (a 400-digit batch overflowed the division and ended watch).
MAX_BATCH = 10**7
MIN_STEP = 0.05  # the linear model's step is kept above this share of the measured one (a shrinking batch)


class Struct(msgspec.Struct, kw_only=True, omit_defaults=False, frozen=True):
    pass


class BatchRow(Struct, kw_only=True):
    batch_size: int
    step_us: float
    samples_per_s: float
    peak_bytes: int | None  # None: memory was not profiled
    fits: bool | None  # None: the device's capacity is not known (a CPU run)
    current: bool = False  # the run's own batch size: its figures are the summary's


class BatchSizes(Struct, kw_only=True):
    batch_size: int  # the run's samples per step (summary.batch_size)
    step_us: float  # the run's step (summary.step_time_us)
    grow_us: float  # added to the step per extra batch's worth of samples (k - 1 times, k = batch / batch_size)
    basis: str  # where the growth comes from, in words
    fixed_bytes: int | None  # peak memory = fixed + per sample x batch
    per_sample_bytes: float | None
    capacity_bytes: int | None  # the device's memory (None on a CPU)
    rows: list[BatchRow]  # the sizes the page shows, smallest first, the run's own among them


def batch_problem(batch: int) -> str | None:
    """Why `batch` is not a batch size to predict or measure, or None when it is one."""
    if not 1 <= batch <= MAX_BATCH:
        return f"the batch size must be a whole number from 1 to {MAX_BATCH:,}"
    return None


def at(model: BatchSizes, batch_size: int) -> BatchRow:
    """The prediction at `batch_size`: a row the model holds as it is, else the model's formula."""
    if problem := batch_problem(batch_size):
        raise ValueError(problem)
    row = next((r for r in model.rows if r.batch_size == batch_size), None)
    if row is not None:
        return row
    k = batch_size / model.batch_size
    step = max(model.step_us + (k - 1) * model.grow_us, MIN_STEP * model.step_us)  # linear, kept positive
    peak = (round(model.fixed_bytes + model.per_sample_bytes * batch_size)
            if model.fixed_bytes is not None and model.per_sample_bytes is not None else None)
    fits = peak <= model.capacity_bytes if peak is not None and model.capacity_bytes else None
    return BatchRow(batch_size=batch_size, step_us=round(step, 3), samples_per_s=round(batch_size * 1e6 / step, 2),
                    peak_bytes=peak, fits=fits)
