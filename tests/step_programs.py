"""Programs of five steps for the replay's tests, built on a planted profiler cost per event (builder.Timeline):
written once, used by tests/test_replay_deperturb.py and tests/test_profiler_cost_once.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from builder import REDUCE, SGEMM, Timeline, TraceBuilder
from stepscope.trace.kineto import read_kineto
from stepscope.trace.model import Trace

STEPS = 5


def gpu_bound(tl: Timeline) -> None:
    """Kernels longer than their launches (8 µs of host per 14 µs kernel), one loss.item() per step: the GPU sets
    the pace unprofiled; with the profiler's cost the host falls behind it."""
    for i in range(STEPS):
        with tl.step(i):
            for _ in range(30):
                with tl.op("aten::linear", overhead=1.0), tl.op("aten::addmm", overhead=1.0):
                    tl.kernel(SGEMM, 14.0, host_us=4.0)
            with tl.op("aten::item"), tl.op("aten::_local_scalar_dense"):
                tl.sync()
            tl.idle(50.0)


def launch_bound(tl: Timeline) -> None:
    """Host-bound even unprofiled (9 µs of host per 3 µs kernel): every µs of cost left in, or taken out twice, moves
    the step."""
    for i in range(STEPS):
        with tl.step(i):
            for _ in range(40):
                with tl.op("aten::relu", overhead=2.0):
                    tl.kernel(REDUCE, 3.0, host_us=5.0)
            tl.sync()


def host_only(tl: Timeline) -> None:
    """A CPU job: ops and Python, no device."""
    for i in range(STEPS):
        with tl.step(i):
            for _ in range(50):
                tl.cpu("aten::add", 8.0)
                tl.idle(3.0)


def trace_of(tmp_path: Path, program: Callable[[Timeline], None], cost: dict[str, float], tag: str) -> Trace:
    """`program` recorded with `cost` (µs per event kind) added by the profiler, read back as a Trace."""
    b = TraceBuilder()
    program(Timeline(b, cost=dict(cost)))
    return read_kineto(b.write(tmp_path / f"{tag}.json"))
