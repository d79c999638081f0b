"""What-if by replay on hand-built programs with known answers: each program is built twice with the builder's
causal timeline, as written and as it would run with the fix, and the what-if replay of the first must give the
second's step (per sample for a bigger batch)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from builder import REDUCE, SGEMM, Timeline, TraceBuilder
from stepscope.analysis.facts import compute_facts
from stepscope.replay import whatif
from stepscope.trace.kineto import read_kineto
from stepscope.trace.model import Trace


def _trace(tmp_path: Path, program: Callable[[Timeline], None], tag: str) -> Trace:
    b = TraceBuilder()
    program(Timeline(b))
    return read_kineto(b.write(tmp_path / f"{tag}.json"))


def _median_step(trace: Trace) -> float:
    return float(np.median(compute_facts(trace).steps.duration))


def test_workers_take_the_loading_off_the_host(tmp_path: Path) -> None:
    def program(tl: Timeline) -> None:  # 800 µs of loading on the main thread, 200 µs of GPU work
        for i in range(5):
            with tl.step(i):
                tl.dataloader(800.0)
                for _ in range(10):
                    tl.kernel(SGEMM, 20.0, host_us=5.0)
                tl.sync()

    trace = _trace(tmp_path, program, "w0")
    base = _median_step(trace)
    four = whatif.more_workers(trace, workers=4, free_cores=None, waits_on_storage=False)
    assert four is not None and four.base_ns == pytest.approx(base)
    # Four workers make a batch every 200 µs; the host's own step (launches, the GPU's 200 µs, the sync) is about
    # as long, plus the 100 µs a batch costs the main process: the longer of the two.
    host_without_loading = base - 800_000
    assert four.step_ns == pytest.approx(max(host_without_loading + 100_000, 200_000), rel=0.01)
    # One free core bounds computing workers to one: a batch every 800 µs.
    one_core = whatif.more_workers(trace, workers=4, free_cores=1, waits_on_storage=False)
    assert one_core is not None and one_core.step_ns == pytest.approx(800_000, rel=0.01)
    # Waiting on storage uses no core: the four workers overlap their waits even on one core.
    storage = whatif.more_workers(trace, workers=4, free_cores=1, waits_on_storage=True)
    assert storage is not None and storage.step_ns == pytest.approx(four.step_ns)


def test_pinned_copies_run_faster_and_stop_blocking(tmp_path: Path) -> None:
    nbytes = 20_000_000

    def program(pinned: bool) -> Callable[[Timeline], None]:
        def run(tl: Timeline) -> None:
            for i in range(5):
                with tl.step(i):
                    # 20 MB at 10 GB/s from pageable memory (2 ms, host blocked), or 20 GB/s pinned (1 ms)
                    tl.copy("HtoD", nbytes, gb_s=20.0 if pinned else 10.0, host="Pinned" if pinned else "Pageable",
                            blocking=not pinned)
                    for _ in range(10):
                        tl.kernel(SGEMM, 100.0, host_us=5.0)
                    tl.cpu("aten::mean", 300.0)
                    tl.sync()
        return run

    as_written = _trace(tmp_path, program(False), "pageable")
    fixed = _trace(tmp_path, program(True), "pinned")
    est = whatif.pinned_copies(as_written, pinned_gb_s=20.0)
    assert est is not None
    assert est.step_ns == pytest.approx(_median_step(fixed), rel=0.01)


def test_a_bigger_batch_grows_the_device_work_not_the_host_or_the_optimizer(tmp_path: Path) -> None:
    def program(k: float) -> Callable[[Timeline], None]:
        def run(tl: Timeline) -> None:
            for i in range(5):
                with tl.step(i):
                    for _ in range(20):
                        tl.kernel(SGEMM, 50.0 * k, host_us=8.0)
                    with tl.op("Optimizer.step#SGD.step", cat="user_annotation"):
                        for _ in range(5):
                            tl.kernel(REDUCE, 10.0, host_us=8.0)
                    tl.sync()
        return run

    base = _trace(tmp_path, program(1.0), "b1")
    for k in (2.0, 4.0):
        truth = _trace(tmp_path, program(k), f"b{k}")
        est = whatif.bigger_batch(base, k)
        assert est.step_ns == pytest.approx(_median_step(truth), rel=0.01)
        assert est.speedup == pytest.approx(k * _median_step(base) / _median_step(truth), rel=0.01)


def test_cuda_graphs_remove_the_launch_cost_and_keep_the_kernels(tmp_path: Path) -> None:
    def program(graphed: bool) -> Callable[[Timeline], None]:
        def run(tl: Timeline) -> None:
            for i in range(5):
                with tl.step(i):
                    tl.idle(40.0)  # Python between steps: stays
                    if graphed:  # the kernels back to back, launched at once
                        for _ in range(50):
                            tl.kernel(REDUCE, 3.0, host_us=0.0)
                    else:
                        for _ in range(50):
                            with tl.op("aten::relu", overhead=3.0):
                                tl.kernel(REDUCE, 3.0, host_us=6.0)
                    tl.sync()
        return run

    as_written = _trace(tmp_path, program(False), "launches")
    truth = _trace(tmp_path, program(True), "graph")
    est = whatif.cuda_graphs(as_written)
    assert est is not None and est.speedup > 3
    assert est.step_ns == pytest.approx(_median_step(truth), rel=0.03)


def test_set_to_none_removes_the_zeroing(tmp_path: Path) -> None:
    def program(zeroing: bool) -> Callable[[Timeline], None]:
        def run(tl: Timeline) -> None:
            for i in range(5):
                with tl.step(i):
                    if zeroing:
                        with tl.op("Optimizer.zero_grad#SGD.zero_grad", cat="user_annotation"):
                            for _ in range(30):
                                tl.memset(gpu_us=2.0, host_us=6.0)
                    for _ in range(20):
                        tl.kernel(SGEMM, 10.0, host_us=8.0)
                    tl.sync()
        return run

    est = whatif.set_to_none(_trace(tmp_path, program(True), "zero"))
    assert est is not None
    assert est.step_ns == pytest.approx(_median_step(_trace(tmp_path, program(False), "none")), rel=0.01)
