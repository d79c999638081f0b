"""The driver: map the per-rank task over an engine, keep the small summaries, report progress and failures."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from stepscope.ranks.engines import Engine, TaskError
from stepscope.ranks.summarize import summarize_chunk
from stepscope.ranks.summary import RankFailure, RankSummary

Progress = Callable[[int, int], None]  # (done, total)
MAX_CHUNK = 8
MIN_TASKS = 128


@dataclass(frozen=True)
class Outcome:
    summaries: list[RankSummary]  # in the order of the files given
    failures: list[RankFailure]


def chunk_size(files: int) -> int:
    """Files per task: one each for a few hundred ranks; up to MAX_CHUNK for thousands, keeping at least
    MIN_TASKS tasks for balance and a progress bar that moves."""
    return max(1, min(MAX_CHUNK, files // MIN_TASKS))


def summarize_files(files: Sequence[str | Path], engine: Engine, *, step_range: str | None = None,
                    progress: Progress | None = None) -> Outcome:
    paths = [str(f) for f in files]
    results: list[RankSummary | RankFailure | None] = [None] * len(paths)
    size = chunk_size(len(paths))
    chunks = [list(range(lo, min(lo + size, len(paths)))) for lo in range(0, len(paths), size)]
    lost: list[int] = []  # files of chunks whose worker died: retried one by one
    done = 0
    task = partial(summarize_chunk, step_range=step_range)
    for c, result in engine.map(task, [[paths[i] for i in chunk] for chunk in chunks]):
        if isinstance(result, TaskError):
            lost += chunks[c] if len(chunks[c]) > 1 else []
            for i in chunks[c]:
                results[i] = RankFailure(paths[i], result.error)
        else:
            for i, summary in zip(chunks[c], result, strict=True):
                results[i] = summary
        done += len(chunks[c])
        if progress is not None:
            progress(done, len(paths))
    for j, result in engine.map(task, [[paths[i]] for i in lost]):
        results[lost[j]] = RankFailure(paths[lost[j]], result.error) if isinstance(result, TaskError) else result[0]
    summaries = [r for r in results if isinstance(r, RankSummary)]
    failures = [r if r is not None else RankFailure(p, "no result came back") for p, r in zip(paths, results,
                strict=True) if not isinstance(r, RankSummary)]
    return Outcome(summaries, failures)
