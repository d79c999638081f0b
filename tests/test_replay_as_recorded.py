"""Replaying the step's graph as recorded reproduces the recorded steps, to the nanosecond, on every real trace we
keep: the graph explains every activity's start by what it waited for (its launch, its stream, another stream, a
sync, a batch from the workers) and keeps what nothing explains, so a replay that changes nothing changes nothing.
Every other use of the replay (the de-perturbed timeline, what-if, other GPUs) stands on this."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import SHARED
from stepscope.analysis.steps import find_steps
from stepscope.replay import replay
from stepscope.trace.load import read_trace
from stepscope.trace.model import Kind

DATA = Path(__file__).parent / "data"
TRACES = sorted([*SHARED.glob("traces/kineto/**/*.json.gz"), *SHARED.glob("traces/gpu-h100-turn3/*/trace.json.gz"),
                 *DATA.glob("**/*.json.gz"), *SHARED.glob("traces/nsys/*.sqlite")])


def _name(path: Path) -> str:
    return str(path.relative_to(SHARED if SHARED in path.parents else DATA))


@pytest.mark.parametrize("path", TRACES, ids=_name)
def test_the_replay_as_recorded_is_the_recorded_trace(path: Path) -> None:
    trace = read_trace(path)
    again = replay(trace)
    recorded, replayed = find_steps(trace), find_steps(again)
    assert recorded.ids == replayed.ids
    np.testing.assert_array_equal(replayed.start, recorded.start)
    np.testing.assert_array_equal(replayed.end, recorded.end)
    # Every event keeps its times (the GPU projections of host ranges are dropped: no analysis reads them).
    kept = ~trace.events.of_kind(Kind.GPU_ANNOTATION, Kind.GPU_SYNC)
    np.testing.assert_array_equal(np.sort(trace.events.start[kept]), np.sort(again.events.start))
    np.testing.assert_array_equal(np.sort(trace.events.end[kept]), np.sort(again.events.end))


def test_there_are_traces_to_replay() -> None:
    assert len(TRACES) >= 40
