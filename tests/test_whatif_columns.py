"""A what-if's replay carries only what the steps are found from (analysis.steps: the columns STEP_COLUMNS, the rows
step_rows, every event but the CPU ops no step source takes): on real GPU traces its median step is the one the
full replay gives, for each kind of change the what-ifs make, and find_steps reads no column outside that list."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

from conftest import kineto_trace
from stepscope.analysis import steps as steps_module
from stepscope.analysis.steps import STEP_COLUMNS, find_steps
from stepscope.replay.engine import replay
from stepscope.replay.whatif import _replayed_step, median_step
from stepscope.trace.load import read_trace

TRACES = ("v100_ddp_train_rank1.json.gz", "a100_convnet_ddp_rank0.json.gz", "a100_recsys_ddp_rank0.json.gz",
          "v100_resnet_ns_units.json.gz")


def _changes(trace) -> dict[str, dict]:
    """One change of each kind: device work slower, some of it gone, host work cut, a host slower."""
    ev = trace.events
    gpu = np.flatnonzero(trace.is_gpu_activity)
    host = np.flatnonzero(~trace.is_gpu_activity)[::7]  # every seventh host event's span taken away
    cut = (ev.start[host].astype(np.float64), ev.end[host].astype(np.float64))
    order = np.argsort(cut[0], kind="stable")
    starts, ends = cut[0][order], np.maximum.accumulate(cut[1][order])
    keep = np.concatenate([[True], starts[1:] >= ends[:-1]])  # disjoint, as the what-ifs' cuts are
    return {
        "device work twice as long": {"rows": gpu, "new_dur": ev.dur[gpu] * 2.0},
        "half the device work gone": {"rows": gpu, "new_dur": np.where(np.arange(len(gpu)) % 2, 0.0,
                                                                       ev.dur[gpu].astype(np.float64))},
        "host intervals cut": {"cut": (starts[keep], ends[keep])},
        "host 1.5x as fast": {"host_speed": 1.5},
    }


@pytest.mark.parametrize("name", TRACES)
def test_the_median_step_of_a_lean_replay_is_the_full_replays(name: str) -> None:
    trace = read_trace(kineto_trace(name))
    n = len(find_steps(trace))
    assert n >= 2
    for what, change in _changes(trace).items():
        full = median_step(replay(trace, **change), n)
        lean = _replayed_step(trace, count=n, **change)
        assert lean == full, (name, what)
        assert full > 0
    lean_table = replay(trace, for_steps=True).events
    assert len(lean_table) < len(trace.events)  # CPU ops left out: a table that is lean


def test_find_steps_reads_only_the_step_columns() -> None:
    """Every events column steps.py names is in STEP_COLUMNS (`end` is start + dur): a new one read there must be
    added to the list, or a what-if's replay would find its steps on an absent column."""
    source = inspect.getsource(steps_module)
    read = set(re.findall(r"\bev(?:ents)?\.([a-z_]+)\b", source)) - {"end", "of_kind"}
    assert read and read <= set(STEP_COLUMNS), read - set(STEP_COLUMNS)
