"""The road for the ranks of one job: a small summary per rank (mapped over an engine for files), reduced into
the cross-rank figures; then the full diagnosis of the main rank (the straggler, else the slowest) and of the
median rank; the job's Report is the main rank's with the cross-rank parts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from stepscope.errors import StepscopeError
from stepscope.model import report as s
from stepscope.model import runfolder
from stepscope.pipeline import assemble, sources
from stepscope.pipeline.options import AnalyzeOptions
from stepscope.ranks import driver, reduce, to_report
from stepscope.ranks.engines import LocalPool
from stepscope.ranks.summarize import collective_args_of, summarize_trace
from stepscope.ranks.summary import RankFailure
from stepscope.trace.model import Trace

OneReport = Callable[[str | Path | Trace, AnalyzeOptions], s.Report]


def analyze_files(files: Sequence[str | Path], options: AnalyzeOptions, one: OneReport) -> s.Report:
    """Rank files, never all in memory: summaries mapped over `options.engine` (a local process pool by default).
    A file that fails is listed in the report; the others go on. The prediction, when asked for, is the main
    rank's (the report's own). `one`: a path's full report (pipeline.flow), run as a task on the engine."""
    own = options.engine is None
    engine = options.engine or LocalPool()
    try:
        outcome = driver.summarize_files(files, engine, step_range=options.step_range, progress=options.progress)
        if not outcome.summaries:
            first = outcome.failures[0]
            raise StepscopeError(f"none of the {len(files)} rank files could be analysed; {first.path}: {first.error}")
        analysis = reduce.cross_rank(outcome.summaries)
        chosen = to_report.chosen_paths(analysis)
        task = partial(_chosen_report, options=options.for_task(main=True), one=one)
        reports = {}
        for i, report in engine.map(task, [(p, i == 0) for i, p in enumerate(chosen)]):
            if not isinstance(report, s.Report):
                raise StepscopeError(f"{chosen[i]}: the full diagnosis failed ({getattr(report, 'error', report)})")
            reports[chosen[i]] = report
    finally:
        if own:
            engine.close()
    return _job(analysis, reports, outcome.failures)


def _chosen_report(job: tuple[str, bool], *, options: AnalyzeOptions, one: OneReport) -> s.Report:
    """A chosen rank's full report (a task on the engine); only the main rank's (`job[1]`) predicts. A rank's trace
    in a `stepscope run` folder is analysed with what its folder measured (its step meter, reference, calibration,
    timing pass, run section), as `stepscope analyze` of that folder alone would: its figures and fixes are its own."""
    path, main = job
    options = options if main else options.for_task(main=False)
    folder = Path(path).parent
    if Path(path).name == runfolder.TRACE:
        options = sources.with_run_folder([folder], options)
    return one(path, options)


def analyze_traces(traces: Sequence[Trace], options: AnalyzeOptions, one: OneReport) -> s.Report:
    """Ranks read already, analysed in this process."""
    summaries = [summarize_trace(t, step_range=options.step_range, args=collective_args_of(t)) for t in traces]
    analysis = reduce.cross_rank(summaries)
    by_path = {t.meta.path: t for t in traces}
    reports = {p: one(by_path[p], options.for_task(main=i == 0))
               for i, p in enumerate(to_report.chosen_paths(analysis))}
    return _job(analysis, reports, [])


def _job(analysis: reduce.CrossRankAnalysis, reports: dict[str, s.Report],
         failures: list[RankFailure]) -> s.Report:
    parts = to_report.job_parts(analysis, reports, failures)
    return assemble.job(reports[parts.main_path], parts)
