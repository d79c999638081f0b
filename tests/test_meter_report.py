"""The report on the step meter: the headline is the meter's, the breakdown's parts and the meter's phases add up to
it in the JSON, the terminal and the HTML page, on a CPU trace and a real H100 trace; the diff sets the phases side by
side. The meter records are planted: each figure below is computed by hand from them."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from builder import TraceBuilder
from stepscope.compare import compare
from stepscope.model.meter import Meter, MeterPhase, MeterRecord, MeterSteps, MeterWorkers
from stepscope.pipeline import analyze
from stepscope.report import render
from stepscope.trace.kineto import read_kineto

DATA = Path(__file__).parent / "data"


def planted(data_ms: float, fwd_ms: float, other_ms: float, steps: int = 20, profiled_from: int = 10,
            batch: int = 16) -> MeterRecord:
    """Steps of data + forward + other ms; steps 0-1 are start-up (left out), the profiler from `profiled_from`."""
    ms = 1_000_000
    walls = [int((data_ms + fwd_ms + other_ms) * ms)] * steps
    walls[0] = 500 * ms
    ends, t = [], 0
    for w in walls:
        t += w
        ends.append(t)
    zeros = [0] * steps
    return MeterRecord(source="optimizer", batch_size=batch, done=True,
                       steps=MeterSteps(end_ns=ends, wall_ns=walls, data_ns=[int(data_ms * ms)] * steps,
                                        forward_ns=[int(fwd_ms * ms)] * steps, backward_ns=zeros,
                                        optimizer_ns=zeros, sync_ns=zeros),
                       profiled=[profiled_from, steps - 3])


def cpu_trace(tmp_path: Path) -> Path:
    b = TraceBuilder(device_name=None)
    for i, t0 in enumerate((0, 1000, 2000)):  # the profiled steps: data 100 µs of 1000 (the profiler hid a wait)
        b.step(i, t0, t0 + 1000)
        b.dataloader(t0, t0 + 100)
        b.op("aten::mm", t0 + 100, t0 + 700)
    return b.write(tmp_path / "t.json")


def text_of(report) -> str:  # type: ignore[no-untyped-def]
    buf = io.StringIO()
    Console(file=buf, width=160, color_system=None).print(render("terminal", report))
    return buf.getvalue()


def test_a_cpu_report_stands_on_the_meter(tmp_path: Path) -> None:
    report = analyze(cpu_trace(tmp_path), meter=planted(data_ms=6, fwd_ms=3, other_ms=1), batch_size=16)
    s = report.summary
    assert s.step_time_us == pytest.approx(10_000.0)  # 6 + 3 + 1 ms, steps 2-9 (0 and the first fifth left out)
    assert s.samples_per_s == pytest.approx(1600.0)
    assert sum(s.breakdown_us.values()) == pytest.approx(10_000.0, abs=0.01)
    assert s.breakdown_us["dataloader"] == pytest.approx(6_000.0)
    # The rest (4 ms) divided as the profiled steps divide theirs: CPU ops 600 of the 900 µs left, other 300.
    assert s.breakdown_us["cpu_exec"] == pytest.approx(4_000 * 600 / 900, rel=1e-4)
    m = report.meter
    assert m is not None and m.steps == 8 and sum(p.mean_us for p in m.phases) == pytest.approx(10_000.0, abs=0.01)
    assert report.patterns[0].id == "input_bound" and report.patterns[0].share == pytest.approx(0.6)
    assert any("profiled steps hid it" in n for n in report.notes)
    rec = next(r for r in report.recommendations if r.id == "dataloader_workers")
    assert rec.estimated_speedup == pytest.approx(10 / 4, rel=0.01)  # 2 workers: a batch every 3 ms < 4 ms of work
    text = text_of(report)
    assert "10.0 ms" in text and "waiting for data" in text
    assert re.search(r"unprofiled\s+10\.0 ms\s+6\.0 ms", text)  # the breakdown's summary row: the meter's figures
    page = render("html", report).decode()
    assert "The job, measured unprofiled (step meter)" in page and "10.0 ms" in page


def test_a_gpu_trace_on_a_planted_meter_adds_up(tmp_path: Path) -> None:
    trace = read_kineto(DATA / "gpu_h100" / "input_bound" / "trace.json.gz")
    report = analyze(trace, meter=planted(data_ms=20, fwd_ms=5, other_ms=15), batch_size=32)
    s = report.summary
    assert s.step_time_us == pytest.approx(40_000.0)
    assert sum(s.breakdown_us.values()) == pytest.approx(40_000.0, abs=0.05)
    assert s.breakdown_us["dataloader"] == pytest.approx(20_000.0)
    assert report.patterns[0].id == "input_bound" and report.patterns[0].share == pytest.approx(0.5)
    # Every other pattern's share is its profiled share of the rest of the step.
    assert sum(p.share for p in report.patterns) <= 1.0 + 1e-6


def test_the_diff_sets_the_phases_side_by_side(tmp_path: Path) -> None:
    path = cpu_trace(tmp_path)
    before = analyze(path, meter=planted(data_ms=6, fwd_ms=3, other_ms=1), batch_size=16)
    after = analyze(path, meter=planted(data_ms=1, fwd_ms=3, other_ms=1), batch_size=16)
    diff = compare(before, after)
    phases = {c.category: (c.before_us, c.after_us, c.delta_us) for c in diff.phases}
    assert phases["data"] == (6000.0, 1000.0, -5000.0) and phases["forward"] == (3000.0, 3000.0, 0.0)
    assert diff.speedup == pytest.approx(2.0)


def meter_of(step_ms: float, data_ms: float, workers: int | None, batch_ms: float | None, cpu_ms: float | None,
             cores: int = 2, busy: float = 1.0) -> Meter:
    return Meter(source="optimizer", steps_measured=30, basis="before the profiler", steps=8, step_us=step_ms * 1e3,
                 median_us=step_ms * 1e3, p10_us=step_ms * 1e3, p90_us=step_ms * 1e3,
                 phases=[MeterPhase(name="data", mean_us=data_ms * 1e3, share=data_ms / step_ms),
                         MeterPhase(name="other", mean_us=(step_ms - data_ms) * 1e3, share=1 - data_ms / step_ms)],
                 workers=MeterWorkers(workers=workers, batches=20, batch_us=batch_ms * 1e3,
                                      batch_cpu_us=cpu_ms * 1e3 if cpu_ms is not None else None, busy_share=busy)
                 if workers else None, num_workers=workers, cpu_cores=cores)


def test_workers_waiting_on_storage_help_without_a_free_core_and_busy_ones_do_not() -> None:
    from stepscope.advice.meter import workers_recommendation

    # The loader: one worker, 46 ms a step, 23 ms of it the main thread's own work; a batch takes the worker
    # 46 ms, almost all of it waiting (1 ms of CPU). Two workers: a batch every 23 ms -> max(23, 23) = 23 ms: 2.0x.
    waiting = workers_recommendation(meter_of(46, 23, 1, 46, 1), None, None)
    assert waiting is not None and waiting.estimated_speedup == pytest.approx(2.0, abs=0.005)
    assert waiting.evidence["suggested_workers"] == 2
    # The same, but the worker computes its batch (46 ms of CPU): the main thread's 23 ms and the batch's 46 ms share
    # 2 cores, so no step under (23 + 46) / 2 = 34.5 ms: 46 / 34.5 = 1.33x, not 2x.
    busy = workers_recommendation(meter_of(46, 23, 1, 46, 46), None, None)
    assert busy is not None and busy.estimated_speedup == pytest.approx(46 / 34.5, abs=0.005)
    # On one core, computing workers cannot beat the step they already give: the CPU floor (23 + 46) / 1 = 69 ms is
    # the step, 1.00x, and the gain filter leaves it out of the recommendations ("considered", with its estimate).
    from stepscope.advice import worth_a_change

    alone = workers_recommendation(meter_of(69, 46, 1, 46, 46, cores=1), None, None)
    assert alone is not None and alone.estimated_speedup == pytest.approx(1.0)
    kept, below = worth_a_change([alone])
    assert kept == [] and below[0].id == "dataloader_workers" and below[0].estimated_speedup == pytest.approx(1.0)
    # Loading in the main thread (workers 0): 2 workers take the whole wait off it, on cores it shares with them.
    first = workers_recommendation(meter_of(30, 20, 0, None, None), None, None)
    assert first is not None and first.estimated_speedup == pytest.approx(30 / 15, abs=0.005)  # max(10, 10, 30/2)


def test_idle_workers_the_loop_waits_for_are_replaced_by_loading_in_the_main_process() -> None:
    """Two workers build a batch in 0.234 ms and idle 91% of the time while the loop waits 0.697 ms a step for them
    (the wait is the batches' trip between processes): built in the main process, the step is the loop's own
    0.566 ms + 0.234 ms = 0.8 ms against 1.263 ms: 1.58x. Measured plain on such a loader (2 cores): 1.07 -> 0.26 ms."""
    from stepscope.advice.meter import _input_bound, workers_recommendation

    meter = meter_of(1.263, 0.697, 2, 0.234, 0.233, busy=0.09)
    rec = workers_recommendation(meter, None, None)
    assert rec is not None and rec.evidence["suggested_workers"] == 0
    assert rec.estimated_speedup == pytest.approx(1.263 / 0.8, abs=0.005)
    assert "num_workers=0" in rec.title
    assert "handing batches between processes" in _input_bound(meter, 0.55, None).title
    # Busy workers (the same figures, busy 90%): more of them, not none
    busy = workers_recommendation(meter_of(1.263, 0.697, 2, 0.234, 0.233, busy=0.9), None, None)
    assert busy is None or busy.evidence["suggested_workers"] > 2
    # Idle workers, but a batch as dear as the wait: loading it in the main process saves nothing
    assert workers_recommendation(meter_of(1.263, 0.697, 2, 0.697, 0.6, busy=0.3), None, None) is None


def test_other_processes_load_before_and_after_the_profiler_is_read_from_the_cpu_counters() -> None:
    """Readings [ns, this process's CPU s, the machine's busy CPU s]: over the first second the machine was busy 1.5 s
    of which 0.5 s ours (others: 1.0 core); over the next two, 1.0 s busy, all ours (others: 0)."""
    from stepscope.pipeline.meter import _others_cores

    readings = [[0.0, 0.0, 0.0], [1e9, 0.5, 1.5], [3e9, 1.5, 2.5]]
    assert _others_cores(readings, 0.0, 1e9) == pytest.approx(1.0)
    assert _others_cores(readings, 1e9, 3e9) == pytest.approx(0.0)
    assert _others_cores(readings, 0.2e9, 0.8e9) == pytest.approx(1.0)  # bracketed by the readings around it
    assert _others_cores([[0.0, 0.0, 0.0], [0.3e9, 0.1, 0.2]], 0.0, 0.3e9) is None  # 0.3 s: 30 ticks, too few
    assert _others_cores(readings, 0.0, 4e9) is None  # no reading after the end


def test_a_process_that_sped_up_when_the_machine_quietened_is_not_blamed_on_the_profiler() -> None:
    """The demo beside a busy process: 2.5 s per step before the profiler, 34 ms after, other processes on 1 core and
    then none. The note names the machine's load; with the load unchanged, the profiler; unknown, both."""
    import msgspec

    from stepscope.pipeline.assemble import meter_notes

    base = meter_of(2530, 1, None, None, None)

    def note(before: float | None, after: float | None) -> str:
        m = msgspec.structs.replace(base, after_step_us=34_000.0, after_steps=4, changed_after=-0.99,
                                    others_cores_before=before, others_cores_after=after)
        return next(n for n in meter_notes(m) if n.startswith("the process ran"))

    assert "the machine's load changed" in note(1.0, 0.0) and "not the profiler" in note(1.0, 0.0)
    assert "the profiler changed it" in note(0.1, 0.0)  # the load barely moved
    assert "the profiler changed it" in note(0.0, 1.0)  # more load after, yet faster: not the load
    assert "may have changed it" in note(None, 0.0) and "other processes' load" in note(None, 0.0)


def test_a_main_process_fetch_that_waits_gets_workers_beyond_the_cores() -> None:
    """Issue 41.5's loader: 8 ms of waiting per sample, batch 16, in the main process, on 2 cores. The meter: a
    130 ms step, 128 ms of it the fetch, 2 ms the loop's own work; the process used 3 ms of CPU a step (all its
    threads, from the CPU counters), so the fetch computes at most 3 of its 128 ms. Workers then wait side by side:
    ceil(128 / 2) = 64, capped at 8: a batch every 128 / 8 = 16 ms -> step max(2, 16) = 16 ms, and the CPU floor
    (2 + 3) / 2 = 2.5 ms is under it: 130 / 16 = 8.12x. (Measured: examples/pattern_input_bound.py --work 0
    --io-ms 8 --batch-size 16 under `stepscope run` on the 2-core CI machine kind was estimated 6.92x at 6 workers;
    plain, 6 workers against 0 ran 6.80x and 7.63x, two alternating pairs.)"""
    from msgspec.structs import replace

    from stepscope.advice.meter import workers_recommendation

    waiting = replace(meter_of(130, 128, 0, None, None), process_cpu_us=3000.0)
    rec = workers_recommendation(waiting, None, None)
    assert rec is not None and rec.evidence["suggested_workers"] == 8 and "num_workers=8" in rec.title
    assert rec.estimated_speedup == pytest.approx(130 / 16, abs=0.01)  # to 2 places
    assert rec.evidence["process_cpu_us_per_step"] == 3000.0 and "mostly waits" in rec.estimate
    # The same wait spent computing (the process's CPU time covers it): 2 workers on 2 cores, as before: the CPU
    # floor (2 + 128) / 2 = 65 ms -> 2.0x.
    computing = replace(meter_of(130, 128, 0, None, None), process_cpu_us=131_000.0)
    rec = workers_recommendation(computing, None, None)
    assert rec is not None and rec.evidence["suggested_workers"] == 2
    assert rec.estimated_speedup == pytest.approx(130 / 65, abs=0.005)
    # Without the counters (under half a second of readings), the wait is taken as CPU: the same 2 workers.
    assert workers_recommendation(meter_of(130, 128, 0, None, None), None, None).evidence["suggested_workers"] == 2


def test_the_process_cpu_per_step_is_read_from_the_cpu_counters() -> None:
    """Readings [ns, this process's CPU s, the machine's busy CPU s] at 0 and 2 s: 0.5 s of this process's CPU over
    2 s = 0.25 cores; a 100 ms step then has 25 ms of the process's CPU time."""
    from stepscope.model.meter import MeterRecord
    from stepscope.pipeline.meter import _process_cpu_us

    record = MeterRecord(source="optimizer", host_cpu=[[0.0, 0.0, 0.0], [2e9, 0.5, 1.0]])
    assert _process_cpu_us(record, 0.1e9, 1.9e9, 100e6) == pytest.approx(25_000.0)
    assert _process_cpu_us(MeterRecord(source="optimizer"), 0.1e9, 1.9e9, 100e6) is None


def test_a_batch_crossing_from_a_worker_costs_its_bytes_on_both_sides() -> None:
    """Issue 41.5's Lightning-like loader: batches of 64 x 131072 float32 (and 64 int64 labels) collated in the main
    process, 33,554,944 bytes. Planted: a 225 ms step, 104 ms of it the fetch, all CPU (process 225 ms a step), 2
    cores. Crossing from a worker: 33,554,944 B x MAIN_NS_PER_BYTE in the main thread, x WORKER_NS_PER_BYTE more in
    the worker (advice/crossing.py). Two workers: the step is at least the main thread's 121 ms + the rebuild, and
    the CPU floor (121 + rebuild + 104 + shared) / 2 is under it. Without the bytes: max(121, 52) and the floor
    (121 + 104) / 2 = 112.5, so 225 / 121 = 1.86x."""
    from msgspec.structs import replace

    from stepscope.advice.crossing import MAIN_NS_PER_BYTE, WORKER_NS_PER_BYTE
    from stepscope.advice.meter import workers_recommendation
    from stepscope.model import report as s

    nbytes = 64 * 131072 * 4 + 64 * 8
    rebuild, shared = nbytes * MAIN_NS_PER_BYTE / 1e3, nbytes * WORKER_NS_PER_BYTE / 1e3
    meter = replace(meter_of(225, 104, 0, None, None), process_cpu_us=225_000.0)
    loader = s.LoaderSettings(num_workers=0, pin_memory=False, persistent_workers=False, batch_bytes=nbytes)
    rec = workers_recommendation(meter, s.Settings(dataloader=loader), None)
    assert rec is not None and rec.evidence["suggested_workers"] == 2
    new = max(121_000 + rebuild, (104_000 + shared) / 2, (121_000 + rebuild + 104_000 + shared) / 2)
    assert new == 121_000 + rebuild  # the main thread's work with the rebuild bounds it
    assert rec.estimated_speedup == pytest.approx(225_000 / new, abs=0.005)
    assert rec.evidence["batch_bytes"] == nbytes and "through shared memory" in rec.estimate
    assert rec.estimated_speedup < 225 / 121 - 0.2  # the bytes cost: against 1.86x without them
    plain = workers_recommendation(meter, s.Settings(dataloader=replace(loader, batch_bytes=None)), None)
    assert plain is not None and plain.estimated_speedup == pytest.approx(225 / 121, abs=0.005)
    # The sleep-waiting loader's batch (16 x 3 x 32 x 32 float32 + 16 labels) crosses for next to nothing: the
    # worker count and the estimate of the test above stay.
    small = s.Settings(dataloader=replace(loader, batch_bytes=16 * 3 * 32 * 32 * 4 + 16 * 8))
    waiting = replace(meter_of(130, 128, 0, None, None), process_cpu_us=3000.0)
    rec = workers_recommendation(waiting, small, None)
    assert rec is not None and rec.evidence["suggested_workers"] == 8
    assert rec.estimated_speedup == pytest.approx(130 / 16, abs=0.01)
