"""`stepscope analyze` on many rank files: the engine options (--dask, --ray, --workers, --strict), the progress
bar over ranks, and the warnings for files that failed or ranks claimed twice."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from stepscope.errors import StepscopeError
from stepscope.model.report import Report
from stepscope.pipeline import AnalyzeOptions, analyze

SHOWN_FAILURES = 20


def add_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("many ranks (see docs/distributed.md)")
    engine = g.add_mutually_exclusive_group()
    engine.add_argument("--dask", metavar="ADDR",
                        help="run the per-rank tasks on a Dask cluster: a scheduler address or file, or 'local'")
    engine.add_argument("--ray", nargs="?", const="", metavar="ADDR",
                        help="run the per-rank tasks on Ray: a local instance, or the cluster at ADDR")
    g.add_argument("--workers", type=int, metavar="N",
                   help="processes for the local pool or a local cluster (default: this machine's cores; 1: in "
                        "this process)")
    g.add_argument("--strict", action="store_true",
                   help="fail (exit 2) when any rank file cannot be analysed, instead of warning")


def take_paths_from_ray(args: argparse.Namespace) -> None:
    """`--ray FOLDER` reads the folder as --ray's address; an existing path there is a trace path."""
    if args.ray and Path(args.ray).exists():
        args.paths.insert(0, args.ray)
        args.ray = ""


def analyze_ranks(args: argparse.Namespace, files: Sequence[Path], options: AnalyzeOptions,
                  show_progress: bool) -> Report:
    from stepscope.ranks.engines import make_engine  # a single trace's analyze loads no engine (process pools)

    engine = make_engine(dask=args.dask, ray=args.ray, ray_requested=args.ray is not None, workers=args.workers)
    with engine, _progress(show_progress, len(files), engine.name) as progress:
        report = analyze(files, options.replace(engine=engine, progress=progress))
    cross = report.cross_rank
    failures = cross.failures if cross else []
    if failures and args.strict:
        first = failures[0]
        raise StepscopeError(f"{len(failures)} of {len(files)} rank files could not be analysed; "
                             f"{first.path}: {first.error}",
                             hint="without --strict the good ranks are analysed and the bad files listed")
    return report


def warn(report: Report, quiet: bool) -> None:
    """Warnings on stderr: the files that failed, ranks claimed by several files."""
    cross = report.cross_rank
    if cross is None:
        return
    if cross.failures:
        total = cross.ranks + len(cross.failures)
        print(f"stepscope: warning: {len(cross.failures)} of {total} rank files could not be analysed "
              "(the others were):", file=sys.stderr)
        shown = cross.failures if not quiet else cross.failures[:1]
        for failure in shown[:SHOWN_FAILURES]:
            print(f"  {failure.path}: {failure.error}", file=sys.stderr)
        if len(cross.failures) > min(len(shown), SHOWN_FAILURES):
            print(f"  ... and {len(cross.failures) - min(len(shown), SHOWN_FAILURES)} more (all listed in the "
                  "report's cross_rank.failures)", file=sys.stderr)
    if cross.duplicate_ranks:
        ranks = ", ".join(str(r) for r in cross.duplicate_ranks[:10]) + (" ..." if len(cross.duplicate_ranks) > 10
                                                                          else "")
        print(f"stepscope: warning: rank {ranks} claimed by more than one file; each file was analysed as its own "
              "rank", file=sys.stderr)


@contextmanager
def _progress(enabled: bool, total: int, engine: str) -> Iterator[Callable[[int, int], None] | None]:
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"ranks on {engine}", total=total)
        yield lambda done, _: bar.update(task, completed=done)
