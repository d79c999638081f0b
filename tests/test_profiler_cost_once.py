"""One correction for the profiler's cost, taken out once: planted ground truth through the whole pipeline.

Each program is built twice with the builder's causal timeline: plain, and with a profiler's host cost per recorded
event (paid just after each timestamp, as torch.profiler pays it) in the shape of the default cost
(host_clock.RECORDED_DEFAULT) times K. The plain build is the unprofiled job, so its steps and its own verdict are the
truth the corrected report must come back to: with a calibration (the cost measured) and without one (the cost sized
to the gap between the recorded and the unprofiled steps), and never below it (a cost taken out twice would take a
host-bound step under its plain time).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder import Timeline
from step_programs import STEPS, gpu_bound, host_only, launch_bound, trace_of
from stepscope.advice import advise
from stepscope.analysis.facts import compute_facts
from stepscope.model import report as s
from stepscope.model.calibration import ProfilerCost
from stepscope.pipeline import analyze
from stepscope.replay.deperturb import deperturb
from stepscope.replay.host_clock import RECORDED_DEFAULT
from stepscope.trace.model import Trace

K = 3.0  # the planted cost: 3x the default per event (op 3.5 µs, runtime call 14.4 µs, range 42.7 µs)
PLANTED_US = {"op": K * RECORDED_DEFAULT.op_ns / 1e3, "launch": K * RECORDED_DEFAULT.launch_ns / 1e3,
              "range": K * RECORDED_DEFAULT.range_ns / 1e3}


def _storage_bound(tl: Timeline) -> None:
    """A CPU step that waits 2 ms for storage in a single-process DataLoader (no op inside: a read), then computes
    in 40 ops of 20 µs. The profiler's cost falls on the ops, not on the read."""
    for i in range(STEPS):
        with tl.step(i):
            with tl.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", overhead=0.0):
                tl.idle(2000.0)
            for _ in range(40):
                tl.cpu("aten::addmm", 20.0)


def _median_us(trace: Trace) -> float:
    return float(np.median(compute_facts(trace).steps.duration)) / 1e3


def _run(reference_us: float, noise: float = 0.0) -> s.Run:
    return s.Run(command=["python", "train.py"], status="window recorded", exit_code=0, step_source="optimizer",
                 skip=5, warmup=2, steps_requested=STEPS, steps_recorded=STEPS, first_recorded_step=7,
                 batch_size=None, batch_size_source=None, profiled_device="cuda", profiler_overhead=None,
                 unprofiled_step_us=reference_us, recorded_step_us=None,
                 reference=s.Reference(method="synchronized slices", step_us=reference_us, values_us=[reference_us],
                                       steps=30, noise=noise))


def _calibration(k: float = K) -> ProfilerCost:
    d = RECORDED_DEFAULT
    return ProfilerCost(op_ns=k * d.op_ns, alloc_ns=0.0, launch_ns=k * d.launch_ns, range_ns=k * d.range_ns,
                        record_shapes=False, profile_memory=False, with_stack=False, cuda=True, seconds=1.0)


def test_without_a_calibration_the_default_cost_is_sized_to_the_gap(tmp_path: Path) -> None:
    """A host-bound CPU step lengthened by exactly the cost paid inside it: the fit finds the planted K."""
    plain, profiled = (trace_of(tmp_path, host_only, cost, tag) for cost, tag in (({}, "plain"), (PLANTED_US, "p")))
    truth_ns = _median_us(plain) * 1e3
    dep = deperturb(profiled, None, truth_ns, "step meter", 0.0)
    assert dep.replayed and dep.source == "fitted" and dep.cost is not None
    assert dep.cost.op_ns == pytest.approx(K * RECORDED_DEFAULT.op_ns, rel=0.01)
    assert dep.cost.range_ns == pytest.approx(K * RECORDED_DEFAULT.range_ns, rel=0.01)
    assert dep.replayed_step_ns == pytest.approx(truth_ns, rel=0.01)
    # Per step: 50 ops (half at each end) and the step's range, each at K times the default.
    assert dep.removed_ns_per_step == pytest.approx(K * (50 * RECORDED_DEFAULT.op_ns + RECORDED_DEFAULT.range_ns),
                                                    rel=0.02)


def test_the_fit_stops_at_the_top_of_the_unprofiled_spread(tmp_path: Path) -> None:
    """Only the overhead beyond the reference's spread comes out: a reference that came out low by chance must not
    over-correct. The replayed step lands on the reference plus its noise (within the fit's 1% of what comes off)."""
    plain, profiled = (trace_of(tmp_path, host_only, cost, tag) for cost, tag in (({}, "plain"), (PLANTED_US, "p")))
    truth_ns, recorded_ns = _median_us(plain) * 1e3, _median_us(profiled) * 1e3
    dep = deperturb(profiled, None, truth_ns, "step meter", 0.05)
    target = truth_ns * 1.05
    assert dep.replayed_step_ns is not None
    assert abs(dep.replayed_step_ns - target) <= 0.01 * (recorded_ns - target) + 0.005 * target
    inside = deperturb(profiled, None, recorded_ns / 1.04, "step meter", 0.05)  # +4% against a ±5% spread
    assert not inside.replayed and "within noise" in (inside.why_not or "")


@pytest.mark.parametrize("calibrated", [True, False], ids=["calibrated", "fitted"])
def test_the_profilers_cost_is_taken_out_once(tmp_path: Path, calibrated: bool) -> None:
    plain = trace_of(tmp_path, launch_bound, {}, "plain")
    profiled = trace_of(tmp_path, launch_bound, PLANTED_US, "profiled")
    truth_us, recorded_us = _median_us(plain), _median_us(profiled)
    assert recorded_us > 1.5 * truth_us, "the planted cost must slow the steps, or the test shows nothing"
    report = analyze([profiled], run=_run(truth_us), calibration=_calibration() if calibrated else None)
    replay, run = report.replay, report.run
    assert replay is not None and replay.replayed and run is not None
    assert replay.cost_source == ("calibration" if calibrated else "fitted")
    # The steps the report reads are the plain ones: not as recorded, and not under them (taken out twice).
    steps = np.array([row.duration_us for row in report.steps])
    np.testing.assert_allclose(np.median(steps), truth_us, rtol=0.02)
    assert report.summary.timeline_step_time_us == pytest.approx(truth_us, rel=0.02)
    # One figure of the overhead and of what came out, the same in the run section and the replay section.
    c = run.overhead_correction
    assert c is not None and c.applied
    assert run.profiler_overhead == c.overhead == pytest.approx(recorded_us / truth_us - 1, abs=1e-3)
    assert c.removed_us_per_step == replay.removed_us_per_step
    # Per step: 40 ops, 41 runtime calls (40 launches, a sync) and the step's range, each K times the default.
    d = RECORDED_DEFAULT
    planted_us = K * (40 * d.op_ns + 41 * d.launch_ns + d.range_ns) / 1e3
    assert c.removed_us_per_step == pytest.approx(planted_us, rel=0.03)
    # The verdict is the plain program's: its primary pattern, at its share.
    truth = advise(compute_facts(plain)).patterns[0]
    assert report.patterns[0].id == truth.id and report.patterns[0].share == pytest.approx(truth.share, abs=0.03)


def test_a_gpu_bound_step_the_profiler_made_host_bound_comes_back_without_a_calibration(tmp_path: Path) -> None:
    """Where the GPU hid part of the cost, a step is lengthened by less than the cost in it: the fit replays again
    with a larger size until the step comes down to the unprofiled one, and the GPU is busy as it is plain. (The
    step does not tell how much more cost there was once the GPU sets its pace: the fit takes the least that brings
    it down, so the split of the GPU's idle between launches and the sync is not asserted.)"""
    plain = trace_of(tmp_path, gpu_bound, {}, "plain")
    profiled = trace_of(tmp_path, gpu_bound, PLANTED_US, "profiled")
    truth_us = _median_us(plain)
    raw = analyze([profiled])
    report = analyze([profiled], run=_run(truth_us))
    assert report.replay is not None and report.replay.replayed and report.replay.cost_source == "fitted"
    assert report.summary.timeline_step_time_us == pytest.approx(truth_us, rel=0.02)
    plain_report = analyze([plain])
    assert plain_report.summary.gpu_utilization is not None and report.summary.gpu_utilization is not None
    assert raw.summary.gpu_utilization is not None and raw.summary.gpu_utilization < 0.75
    assert report.summary.gpu_utilization == pytest.approx(plain_report.summary.gpu_utilization, abs=0.03)


def test_nothing_is_taken_out_inside_the_noise_and_the_note_says_so(tmp_path: Path) -> None:
    profiled = trace_of(tmp_path, launch_bound, PLANTED_US, "profiled")
    recorded_us = _median_us(profiled)
    report = analyze([profiled], run=_run(recorded_us * 1.03, noise=0.05))  # -3% against a ±5% spread
    c = report.run.overhead_correction if report.run else None
    assert c is not None and c.within_noise and not c.applied and c.removed_us_per_step == 0
    assert report.replay is not None and not report.replay.replayed
    assert any("within noise" in n for n in report.notes)
    assert [row.duration_us for row in report.steps] == [row.duration_us for row in analyze([profiled]).steps]


def test_a_storage_wait_keeps_its_length_and_the_verdict_is_the_plain_one(tmp_path: Path) -> None:
    """Unprofiled the step waits 2 ms of about 2.8 (input_bound); the planted cost falls on the ops. Fitted without a
    calibration, the step and the data wait's share come back to the plain program's."""
    plain = trace_of(tmp_path, _storage_bound, {}, "plain")
    profiled = trace_of(tmp_path, _storage_bound, {k: 10 * v for k, v in PLANTED_US.items()}, "profiled")
    truth_us = _median_us(plain)
    report = analyze([profiled], run=_run(truth_us))
    assert report.replay is not None and report.replay.cost_source == "fitted"
    assert report.summary.timeline_step_time_us == pytest.approx(truth_us, rel=0.02)
    loader = next(p for p in report.patterns if p.id == "input_bound")
    assert loader.share == pytest.approx(2000.0 / truth_us, abs=0.02)
    raw = next(p for p in analyze([profiled]).patterns if p.id == "input_bound")
    assert raw.share < loader.share - 0.1  # as recorded the inflated ops hid it
