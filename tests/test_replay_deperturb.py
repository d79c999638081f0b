"""The de-perturbed replay against planted ground truth: the same program is built twice with the builder's causal
timeline, once with a profiler's host cost per recorded event (paid just after each timestamp, as torch.profiler
pays it) and once without. Replaying the first with that cost taken out must give the second's steps: the job as
it runs. A GPU-bound program that the profiler made look host-bound must come back GPU-bound."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from builder import REDUCE, SGEMM, Timeline, TraceBuilder
from step_programs import gpu_bound, host_only, launch_bound, trace_of
from stepscope.analysis.facts import compute_facts
from stepscope.model.calibration import ProfilerCost
from stepscope.replay import HostCost, replay
from stepscope.replay.deperturb import deperturb
from stepscope.trace.kineto import read_kineto


def measured(op_ns: float, launch_ns: float, range_ns: float = 0.0) -> ProfilerCost:
    """A calibration as capture measures it: the cost per event, the rest of its fields as a CUDA run's."""
    return ProfilerCost(op_ns=op_ns, alloc_ns=0.0, launch_ns=launch_ns, range_ns=range_ns, record_shapes=False,
                        profile_memory=False, with_stack=False, cuda=True, seconds=1.0)

COST_US = {"op": 6.0, "launch": 3.0, "range": 10.0}  # a heavy profiler: shapes and memory, a slow host
HOST_COST = HostCost(op_ns=6_000, launch_ns=3_000, range_ns=10_000)


def _worker_batches(tl: Timeline) -> None:
    """Workers make a batch every 900 µs; the step's own work takes less unprofiled, more profiled."""
    for i in range(5):
        with tl.step(i):
            tl.worker_batch(ready_at=900.0 * (i + 1))
            for _ in range(30):
                with tl.op("aten::conv2d", overhead=3.0):
                    tl.kernel(SGEMM, 20.0, host_us=5.0)
            tl.sync()


def _two_streams(tl: Timeline) -> None:
    for i in range(5):
        with tl.step(i):
            for _ in range(8):
                with tl.op("aten::mm", overhead=2.0):
                    tl.kernel(SGEMM, 60.0, host_us=5.0)
                tl.kernel(REDUCE, 40.0, host_us=5.0, stream=8, after=(7,))
            tl.kernel(SGEMM, 20.0, host_us=5.0, after=(8,))
            tl.sync()


# Steps the planted cost slows; the others wait on the device or on the workers, and must not come out faster.
SLOWED_BY_THE_PROFILER = {"gpu_bound", "launch_bound", "host_only"}
PROGRAMS: dict[str, Callable[[Timeline], None]] = {
    "gpu_bound": gpu_bound, "launch_bound": launch_bound, "worker_batches": _worker_batches,
    "two_streams": _two_streams, "host_only": host_only}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_profilers_cost_taken_out_gives_the_unprofiled_steps(tmp_path: Path, name: str) -> None:
    plain = trace_of(tmp_path, PROGRAMS[name], {}, "plain")
    profiled = trace_of(tmp_path, PROGRAMS[name], COST_US, "profiled")
    truth = compute_facts(plain).steps.duration
    recorded = compute_facts(profiled).steps.duration
    replayed = compute_facts(replay(profiled, host_cost=HOST_COST)).steps.duration
    if name in SLOWED_BY_THE_PROFILER:
        assert np.all(recorded > truth * 1.05), "the planted cost must slow every step, or the test shows nothing"
    # Within 2% of each unprofiled step (the launch latency keeps the share of the cost paid inside the launch).
    np.testing.assert_allclose(replayed, truth, rtol=0.02)


def test_a_gpu_bound_step_that_the_profiler_made_host_bound_comes_back_gpu_bound(tmp_path: Path) -> None:
    plain = compute_facts(trace_of(tmp_path, gpu_bound, {}, "plain"))
    profiled_trace = trace_of(tmp_path, gpu_bound, COST_US, "profiled")
    profiled = compute_facts(profiled_trace)
    replayed = compute_facts(replay(profiled_trace, host_cost=HOST_COST))

    def busy(facts):  # type: ignore[no-untyped-def]
        usage = facts.gpu.devices[facts.gpu.primary]
        return float(usage.busy.sum() / facts.steps.duration.sum())

    # Unprofiled the GPU is busy nearly all the time; the profiler's cost opens gaps in it; the replay closes them.
    assert busy(plain) > 0.85 and busy(profiled) < 0.75
    assert abs(busy(replayed) - busy(plain)) < 0.03


def test_with_no_cost_the_replay_is_the_trace(tmp_path: Path) -> None:
    trace = trace_of(tmp_path, _worker_batches, COST_US, "profiled")
    again = replay(trace)
    np.testing.assert_array_equal(np.sort(trace.events.start), np.sort(again.events.start))
    np.testing.assert_array_equal(np.sort(trace.events.end), np.sort(again.events.end))


def test_deperturb_reports_its_error_against_the_unprofiled_step(tmp_path: Path) -> None:
    plain = trace_of(tmp_path, launch_bound, {}, "plain")
    profiled = trace_of(tmp_path, launch_bound, COST_US, "profiled")
    truth = float(np.median(compute_facts(plain).steps.duration))
    calibration = measured(op_ns=6_000, launch_ns=3_000, range_ns=10_000)
    result = deperturb(profiled, calibration, truth, "synchronized slices")
    assert result.replayed and result.why_not is None
    assert result.error is not None and abs(result.error) < 0.02 and result.trusted
    assert result.recorded_step_ns is not None and result.recorded_step_ns > 1.05 * truth
    # Per step, the cost of the events on the step's path: 40 ops and 41 runtime calls, the step range.
    expected = 40 * 6_000 + 41 * 3_000 + 10_000
    assert result.removed_ns_per_step == pytest.approx(expected, rel=0.02)


def test_deperturb_falls_back_to_the_recorded_trace_and_says_why(tmp_path: Path) -> None:
    profiled = trace_of(tmp_path, launch_bound, COST_US, "profiled")
    calibration = measured(op_ns=6_000, launch_ns=3_000, range_ns=10_000)
    recorded = float(np.median(compute_facts(profiled).steps.duration))
    cases = {
        # Without a calibration the cost is sized to the gap: there is none beyond the unprofiled steps' spread.
        "no calibration, within noise": deperturb(profiled, None, recorded / 1.01, "synchronized slices", 0.02),
        "no calibration, faster": deperturb(profiled, None, recorded * 1.5, "synchronized slices", 0.02),
        "no reference": deperturb(profiled, calibration, None, None),
        "host clock on a GPU": deperturb(profiled, calibration, 1e6, "host clock"),
    }
    for case, result in cases.items():
        assert not result.replayed and result.trace is profiled, case
        assert result.why_not, case


def test_a_gpu_trace_without_launch_links_is_not_replayed(tmp_path: Path) -> None:
    b = TraceBuilder()
    launch_bound(Timeline(b, cost=dict(COST_US)))
    for event in b.events:  # the kernels lose their correlation ids, as in a mangled export
        if event.get("cat") == "kernel":
            event["args"].pop("correlation", None)
    trace = read_kineto(b.write(tmp_path / "unlinked.json"))
    result = deperturb(trace, measured(op_ns=6_000, launch_ns=3_000), 1e6, "synchronized slices")
    assert not result.replayed and "linked" in (result.why_not or "")


def test_the_cost_paid_inside_a_launch_comes_out_of_its_latency(tmp_path: Path) -> None:
    """The builder's kernel starts when its launch call returns, so the cost paid inside the call delays it: taken
    out of the host's clock but not out of the launch's latency, the replayed GPU would wait on its queue (device
    wait) where the plain one waits for the host's launches."""
    plain = compute_facts(trace_of(tmp_path, launch_bound, {}, "plain")).parts.parts
    replayed = compute_facts(replay(trace_of(tmp_path, launch_bound, COST_US, "profiled"), host_cost=HOST_COST))
    assert plain["device_wait"].mean() == 0 and plain["launch"].mean() > 0
    np.testing.assert_allclose(replayed.parts.parts["launch"].mean(), plain["launch"].mean(), rtol=0.05)
    assert replayed.parts.parts["device_wait"].mean() < 0.05 * plain["launch"].mean()
