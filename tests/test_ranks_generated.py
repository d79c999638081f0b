"""Generated jobs (tests/rank_generator.py) with planted stragglers, shifted clocks and exact answers; the same
answers from every engine."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rank_generator import generate
from stepscope.model.report import to_json
from stepscope.pipeline import analyze
from stepscope.ranks.driver import chunk_size, summarize_files
from stepscope.ranks.engines import Engine, InProcess, LocalPool, TaskError
from stepscope.ranks.reduce import CrossRankAnalysis, cross_rank

BASE = Path(__file__).parent / "data" / "gloo_ddp" / "dataloader_straggler" / "rank0.json.gz"


def _matched_steps(analysis: CrossRankAnalysis) -> list[int]:
    """The steps (0-based) whose first collective was matched: the last one runs past the end of profiling."""
    ids = analysis.step_ids
    return [ids.index(k.split("|")[1]) for k in analysis.alignment.keys]


@pytest.mark.parametrize(("cause", "expected"), [("dataloader", "dataloader"), ("compute", "cpu_exec")])
def test_planted_straggler_cause_clocks_and_skew(tmp_path: Path, cause: str, expected: str) -> None:
    truth = generate(BASE, tmp_path, ranks=24, straggler=13, cause=cause, small=True, seed=3)
    outcome = summarize_files(truth.files, InProcess())
    assert not outcome.failures
    a = cross_rank(outcome.summaries)
    assert a.straggler is not None and a.summaries[a.straggler.index].rank == 13
    assert a.straggler.cause is not None and a.straggler.cause.category == expected
    # Clocks: every rank's offset recovered up to the consensus (the median rank's clock), to the nanosecond.
    truth_ns = truth.clock_offset_us * 1000
    assert np.abs((a.alignment.offset - np.median(a.alignment.offset)) - (truth_ns - np.median(truth_ns))).max() <= 2
    steps = _matched_steps(a)
    assert len(steps) == 3
    np.testing.assert_allclose(a.alignment.skew / 1000, truth.skew_us[steps], atol=0.01)
    assert (a.alignment.last == 13).all()
    # Each early rank waits for the straggler exactly what the straggler was late by, against it.
    late_by = truth.delay_us[13][steps] - truth.delay_us[:, steps]
    np.testing.assert_allclose(a.alignment.wait / 1000, late_by, atol=0.01)


def test_1024_ranks_on_the_local_pool(tmp_path: Path) -> None:
    truth = generate(BASE, tmp_path, ranks=1024, straggler=777, small=True, delay_ms=5.0, seed=1)
    report = analyze(truth.files, engine=LocalPool(2))
    cr = report.cross_rank
    assert cr is not None and cr.ranks == 1024 and not cr.failures
    assert cr.straggler is not None and cr.straggler.rank == 777 and report.rank == 777
    assert cr.straggler.cause is not None and cr.straggler.cause.category == "dataloader"
    assert cr.straggler.arrived_last_share == 1.0 and cr.collectives == 3
    assert len(report.ranks) == 1024 and [r.rank for r in report.ranks] == list(range(1024))


def _report_json(files: list[Path], engine: Engine) -> bytes:
    with engine:
        return to_json(analyze(files, engine=engine))


def test_every_engine_gives_the_same_report(tmp_path: Path) -> None:
    environ = dict(os.environ)
    truth = generate(BASE, tmp_path, ranks=6, straggler=4, small=True, seed=5)
    reference = _report_json(truth.files, InProcess())
    assert _report_json(truth.files, LocalPool(2)) == reference
    pytest.importorskip("distributed")
    from stepscope.ranks.engines import DaskEngine

    assert _report_json(truth.files, DaskEngine("local", workers=2)) == reference
    # A closed engine leaves the caller's environment as it found it: a LocalCluster had set OMP_NUM_THREADS=1
    # here, which every later subprocess (a training run) would have inherited.
    assert dict(os.environ) == environ
    pytest.importorskip("ray")
    environ = dict(os.environ)  # importing ray sets RAY_CLIENT_MODE=0 itself
    from stepscope.ranks.engines import RayEngine

    assert _report_json(truth.files, RayEngine(None, workers=2)) == reference
    assert dict(os.environ) == environ


class _DiesOnBigTasks(InProcess):
    """An engine whose worker dies on every task of more than one file (as if a big trace ran it out of memory)."""

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        for i, item in enumerate(items):
            yield i, TaskError("worker killed") if len(item) > 1 else fn(item)


def test_files_of_a_lost_task_are_retried_one_by_one(tmp_path: Path) -> None:
    assert chunk_size(1024) == 8 and chunk_size(200) == 1
    truth = generate(BASE, tmp_path, ranks=256, straggler=3, small=True)  # 2 files per task
    outcome = summarize_files(truth.files, _DiesOnBigTasks())
    assert not outcome.failures and len(outcome.summaries) == 256
    one = summarize_files(truth.files[:1], _DiesOnBigTasks())
    assert len(one.summaries) == 1
