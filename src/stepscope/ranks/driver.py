"""The driver: map the per-rank task over an engine, keep the small summaries, report progress and failures."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from stepscope.ranks.engines import Engine, TaskError
from stepscope.ranks.summarize import summarize_file
from stepscope.ranks.summary import RankFailure, RankSummary

Progress = Callable[[int, int], None]  # (done, total)


@dataclass(frozen=True)
class Outcome:
    summaries: list[RankSummary]  # in the order of the files given
    failures: list[RankFailure]


def summarize_files(files: Sequence[str | Path], engine: Engine, *, step_range: str | None = None,
                    progress: Progress | None = None) -> Outcome:
    paths = [str(f) for f in files]
    results: list[RankSummary | RankFailure | None] = [None] * len(paths)
    task = partial(summarize_file, step_range=step_range)
    for done, (i, result) in enumerate(engine.map(task, paths), 1):
        results[i] = RankFailure(paths[i], result.error) if isinstance(result, TaskError) else result
        if progress is not None:
            progress(done, len(paths))
    summaries = [r for r in results if isinstance(r, RankSummary)]
    failures = [r if r is not None else RankFailure(p, "no result came back") for p, r in zip(paths, results,
                strict=True) if not isinstance(r, RankSummary)]
    return Outcome(summaries, failures)
