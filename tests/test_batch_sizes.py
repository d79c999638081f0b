"""The Report's batch_sizes section (pipeline/batch_sizes.py, model/batches.py) on hand-built summaries: the step from
the report's larger_batch estimate or, without one, from the parts that grow with the batch; the memory model; the
run's own row is the summary's figures; a run through the pipeline carries it."""

from __future__ import annotations

import pytest

from stepscope.model import report as s
from stepscope.model.batches import MAX_BATCH, at, batch_problem
from stepscope.model.usage import DeviceMemoryUsage, MemoryCategory, MemoryUsage
from stepscope.pipeline.batch_sizes import batch_sizes

CPU = s.Device(name="CPU", kind="cpu")


def summary(step: float, batch: int, breakdown: dict[str, float] | None = None) -> s.Summary:
    return s.Summary(step_time_us=step, breakdown_us=breakdown or {"cpu_exec": step}, gpu_utilization=None,
                     steps_per_s=round(1e6 / step, 3), samples_per_s=round(round(1e6 / step, 3) * batch, 2),
                     batch_size=batch)


def test_from_the_reports_estimate_and_memory() -> None:
    # Batch 32, step 1000 µs; larger_batch: 2x the batch -> 1.6x samples/s, so the 2x step is 2 x 1000 / 1.6 =
    # 1250 µs: 250 µs more per extra batch. Memory: 4800 bytes of activations and temporaries over 32 samples =
    # 150 per sample; the peak 10000 leaves 5200 fixed.
    rec = s.Recommendation(id="larger_batch", title="t", evidence={"batch_factor": 2}, location=None,
                           estimated_speedup=1.6)
    mem = MemoryUsage(devices=[DeviceMemoryUsage(
        device=-1, peak_allocated_bytes=10000, peak_reserved_bytes=None, reserved_gap_bytes=None, phase="backward",
        peak_step="1", categories=[MemoryCategory(name="activations", bytes=3200),
                                   MemoryCategory(name="temporaries", bytes=1600),
                                   MemoryCategory(name="gradients", bytes=5200)])])
    model = batch_sizes(summary(1000.0, 32), [rec], mem, CPU)
    assert model is not None and model.batch_size == 32 and model.grow_us == pytest.approx(250)
    at128 = at(model, 128)
    assert at128.step_us == pytest.approx(1000 + 3 * 250)
    assert at128.samples_per_s == pytest.approx(128 / 1750e-6, abs=0.01)
    assert at128.peak_bytes == 5200 + 150 * 128 and at128.fits is None  # a CPU: no capacity to fit in
    # The rows the page shows: 8, 16, 32, 64, 128, 256; the run's own is the summary's figures, marked.
    assert [r.batch_size for r in model.rows] == [8, 16, 32, 64, 128, 256]
    [own] = [r for r in model.rows if r.current]
    assert (own.batch_size, own.step_us, own.samples_per_s, own.peak_bytes) == (32, 1000.0, 32_000.0, 10000)
    assert at(model, 128) == model.rows[4]  # a row is answered as the Report holds it


def test_without_an_estimate_the_op_time_grows() -> None:
    # No larger_batch estimate: cpu_exec (600 of the 1000 µs step) grows with the batch, `other` stays.
    model = batch_sizes(summary(1000.0, 16, {"cpu_exec": 600.0, "other": 400.0}), [], None, CPU)
    assert model is not None and model.grow_us == pytest.approx(600) and model.fixed_bytes is None
    assert at(model, 32).step_us == pytest.approx(1600) and at(model, 32).peak_bytes is None
    assert at(model, 1).step_us == pytest.approx(1000 - 15 / 16 * 600)  # 1/16 of the batch: 562.5 µs less
    # An estimate that the doubled batch is 2x slower per sample (speedup 0.5): the 2x step is 4000 µs, 3000 µs more
    # per batch; at batch 1 of 16 the line would fall below zero and is kept at 5% of the step.
    worse = s.Recommendation(id="larger_batch", title="t", evidence={"batch_factor": 2}, location=None,
                             estimated_speedup=0.5)
    model = batch_sizes(summary(1000.0, 16), [worse], None, CPU)
    assert model is not None and model.grow_us == pytest.approx(3000)
    assert at(model, 1).step_us == pytest.approx(1000 * 0.05)


def test_no_batch_or_no_step_has_no_section_and_bad_sizes_are_refused() -> None:
    no_batch = s.Summary(step_time_us=1000.0, breakdown_us={}, gpu_utilization=None)
    assert batch_sizes(no_batch, [], None, CPU) is None
    model = batch_sizes(summary(1000.0, 4), [], None, CPU)
    assert model is not None and [r.batch_size for r in model.rows] == [1, 2, 4, 8, 16, 32]
    assert batch_problem(0) and batch_problem(MAX_BATCH + 1) and batch_problem(MAX_BATCH) is None
    with pytest.raises(ValueError):
        at(model, 0)
