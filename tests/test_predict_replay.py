"""The replay against planted ground truth: the same synthetic program is built twice with the builder's causal
timeline (once with GPU work k times as long), and replaying the first with the second's GPU durations must give
the second's timeline; with the measured durations it must give the first one back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from builder import REDUCE, SGEMM, Timeline, TraceBuilder
from stepscope.analysis.facts import compute_facts
from stepscope.replay import blocking_calls, replay
from stepscope.trace.kineto import read_kineto
from stepscope.trace.model import Kind, Trace

CONV = "sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nchw"


def _sync_program(tl: Timeline, gpu: float, host: float = 1.0) -> None:
    """Kernels, then loss.item() (a DtoH copy into pageable memory and a stream sync), then Python."""
    for i in range(4):
        with tl.step(i):
            for _ in range(3):
                with tl.op("aten::linear", overhead=2.0 * host):
                    for _ in range(3):
                        tl.kernel(REDUCE, 300.0 * gpu, host_us=10.0 * host)
                with tl.op("aten::item"), tl.op("aten::_local_scalar_dense"):
                    tl.copy("DtoH", 4, gb_s=1.0)
                    tl.sync()
                tl.idle(400.0 * host)


def _input_program(tl: Timeline, gpu: float, host: float = 1.0) -> None:
    for i in range(4):
        with tl.step(i):
            tl.dataloader(6000.0 * host)
            for _ in range(6):
                with tl.op("aten::conv2d", overhead=2.0 * host):
                    tl.kernel(CONV, 500.0 * gpu, host_us=5.0 * host)
            tl.sync()


def _deep_queue_program(tl: Timeline, gpu: float, host: float = 1.0) -> None:
    """The host launches far ahead of the GPU and syncs once per step (an optimizer reading a scalar)."""
    for i in range(4):
        with tl.step(i):
            for _ in range(20):
                with tl.op("aten::mm", overhead=2.0 * host):
                    tl.kernel(SGEMM, 1000.0 * gpu, host_us=5.0 * host)
            tl.cpu("optimizer", 300.0 * host)
            tl.sync()


def _two_stream_program(tl: Timeline, gpu: float, host: float = 1.0) -> None:
    """A side stream whose kernel waits on the main stream's (an event), and the main stream waiting back."""
    for i in range(4):
        with tl.step(i):
            for _ in range(5):
                with tl.op("aten::mm", overhead=2.0 * host):
                    tl.kernel(SGEMM, 200.0 * gpu, host_us=5.0 * host)
                tl.kernel(REDUCE, 150.0 * gpu, host_us=5.0 * host, stream=8, after=(7,))
            tl.kernel(SGEMM, 50.0 * gpu, host_us=5.0 * host, after=(8,))
            tl.sync()


Program = Callable[[Timeline, float], None]
PROGRAMS = {"sync": _sync_program, "input": _input_program, "deep_queue": _deep_queue_program,
            "two_streams": _two_stream_program}


def _trace(tmp_path: Path, program: Callable[..., None], gpu: float, host: float = 1.0, tag: str = "") -> Trace:
    b = TraceBuilder()
    program(Timeline(b), gpu, host)
    return read_kineto(b.write(tmp_path / f"t{gpu}-{host}{tag}.json"))


def _device_rows(trace: Trace) -> np.ndarray:
    return np.flatnonzero(trace.is_gpu_activity & (trace.events.device == 0))


def _times(trace: Trace) -> list[np.ndarray]:
    """Per kind of event, the (start, end) pairs in order: the timeline, whatever order its rows sort in."""
    ev = trace.events
    out = []
    for kind in Kind:
        rows = np.flatnonzero(ev.kind == kind)
        out.append(np.sort(np.stack([ev.start[rows], ev.end[rows]]), axis=1))
    return out


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_measured_durations_give_the_measured_timeline_back(tmp_path: Path, name: str) -> None:
    trace = _trace(tmp_path, PROGRAMS[name], 1.0)
    rows = _device_rows(trace)
    again = replay(trace, device=0, rows=rows, new_dur=trace.events.dur[rows])
    for a, b in zip(_times(trace), _times(again), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("k", [0.25, 0.5, 2.0, 3.0])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_new_durations_give_the_timeline_the_program_would_have(tmp_path: Path, name: str, k: float) -> None:
    measured, truth = _trace(tmp_path, PROGRAMS[name], 1.0), _trace(tmp_path, PROGRAMS[name], k)
    rows, truth_rows = _device_rows(measured), _device_rows(truth)
    predicted = replay(measured, device=0, rows=rows, new_dur=truth.events.dur[truth_rows])
    # Every event, host and GPU, where the program built with k-times GPU work has it (builder times are µs
    # floats; the reader rounds to ns, so allow a ns per event).
    for a, b in zip(_times(truth), _times(predicted), strict=True):
        np.testing.assert_allclose(a, b, atol=2)
    steps_truth = compute_facts(truth).steps.duration
    steps_predicted = compute_facts(predicted).steps.duration
    np.testing.assert_allclose(steps_predicted, steps_truth, atol=5)


@pytest.mark.parametrize("name", ["input", "deep_queue", "sync"])
def test_host_speed_scales_the_host_timeline(tmp_path: Path, name: str) -> None:
    """A host twice as fast: the program's host-side times halved in the builder; the replay halves the traced
    host times. The builder's fixed 1-2 µs tails of copies and syncs are not halved, hence the tolerance."""
    measured = _trace(tmp_path, PROGRAMS[name], 1.0, 1.0)
    truth = _trace(tmp_path, PROGRAMS[name], 1.0, 0.5, tag="fast")
    rows = _device_rows(measured)
    predicted = replay(measured, device=0, rows=rows, new_dur=measured.events.dur[rows], host_speed=2.0)
    want = compute_facts(truth).steps.duration.mean()
    got = compute_facts(predicted).steps.duration.mean()
    assert got == pytest.approx(want, rel=0.01)


def test_hand_computed_sync_step(tmp_path: Path) -> None:
    """Host: launch three 100 µs kernels (calls of 5 µs at 0, 5, 10), then sync at 15. GPU: kernels start 5 µs
    after their call, back to back: 5-105, 105-205, 205-305; the sync returns 2 µs after the GPU is done (307).
    With kernels of 40 µs: 5-45, 45-85, 85-125, sync until 127; 10 µs of Python after it ends at 137, not 317."""
    b = TraceBuilder()
    tl = Timeline(b)
    with tl.step(0):
        for _ in range(3):
            tl.kernel(SGEMM, 100.0)
        tl.sync()
        tl.cpu("python", 10.0)
    trace = read_kineto(b.write(tmp_path / "t.json"))
    assert compute_facts(trace).steps.duration[0] == 317_000
    rows = _device_rows(trace)
    predicted = replay(trace, device=0, rows=rows, new_dur=np.full(len(rows), 40_000))
    ev = predicted.events
    kernels = ev.kind == Kind.KERNEL
    np.testing.assert_array_equal(ev.start[kernels], [5_000, 45_000, 85_000])
    sync = blocking_calls(predicted)
    assert ev.end[sync].tolist() == [127_000]
    assert compute_facts(predicted).steps.duration[0] == 137_000


def test_a_sync_that_did_not_wait_waits_when_the_gpu_is_slower(tmp_path: Path) -> None:
    """The sync at 400 µs found the GPU done at 105; with a 1 ms kernel it returns 2 µs... after the GPU, at
    1005 µs plus the call's measured 2 µs of its own: the call took 2 µs and did not wait."""
    b = TraceBuilder()
    tl = Timeline(b)
    with tl.step(0):
        tl.kernel(SGEMM, 100.0)
        tl.cpu("python", 395.0)
        tl.sync()
    trace = read_kineto(b.write(tmp_path / "t.json"))
    rows = _device_rows(trace)
    predicted = replay(trace, device=0, rows=rows, new_dur=np.array([1_000_000]))
    sync = blocking_calls(predicted)
    assert predicted.events.start[sync].tolist() == [400_000]
    assert predicted.events.end[sync].tolist() == [1_005_000]
