"""Rank 0 of a job under a launcher, once its own report is out: the job across its ranks (the straggler, its cause,
the collectives' skew), from the ranks' folders in the job folder, when they are there. Loaded, as run_finish, only
once the program has ended.

The other ranks analyse their own windows while rank 0 does; rank 0 waits for their report.json a bounded time
(never for a rank that failed or writes elsewhere), then analyses the ranks it has, as `stepscope analyze JOB` would,
in this process: the job folder gets report.txt and report.html (no report.json: the folder's .json files would be
read as traces)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from stepscope.errors import StepscopeError
from stepscope.model.runfolder import REPORT_HTML, REPORT_JSON, REPORT_TEXT, TRACE
from stepscope.pipeline import AnalyzeOptions, analyze
from stepscope.ranks.engines import InProcess
from stepscope.report import sections
from stepscope.report.terminal import make_console, render_section
from stepscope.runreport import write_report_files

WAIT_S = 60.0  # after rank 0's own report: the others ran the same steps and analyse as much
POLL_S = 0.5


def ready_ranks(job: Path, world: int, wait_s: float = WAIT_S) -> list[Path]:
    """The rank folders whose report is written, once all `world` of them are or `wait_s` has passed."""
    folders = [job / f"rank{rank}" for rank in range(world)]
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        ready = [f for f in folders if (f / REPORT_JSON).is_file() and (f / TRACE).is_file()]
        if len(ready) == world or time.monotonic() >= deadline:
            return ready
        if not said:
            print(f"stepscope: waiting up to {wait_s:g} s for the other ranks' folders in {job}", file=sys.stderr,
                  flush=True)
            said = True
        time.sleep(POLL_S)


def job_report(job: Path, world: int, width: int | None, *, wait_s: float = WAIT_S) -> None:
    """Print the job's section across its ranks and write the job folder's report.txt and report.html; a line saying
    why not when fewer than two ranks' folders are there, or the analysis failed (rank 0's own run stands)."""
    ready = ready_ranks(job, world, wait_s)
    missing = [f"rank{rank}" for rank in range(world) if job / f"rank{rank}" not in ready]
    again = f"stepscope analyze {job}"
    if len(ready) < 2:
        print(f"stepscope: no report across the ranks: {', '.join(missing)} wrote no report in {job} within "
              f"{wait_s:g} s; once they have: {again}", file=sys.stderr)
        return
    try:
        with InProcess() as engine:
            report = analyze([f / TRACE for f in ready], AnalyzeOptions(engine=engine))
    except StepscopeError as exc:
        print(f"stepscope: no report across the ranks: {exc.message}", file=sys.stderr)
        return
    except Exception as exc:  # a bug in the job's analysis must not cost rank 0 its run
        print(f"stepscope: the report across the ranks failed ({type(exc).__name__}: {exc}); try: {again}",
              file=sys.stderr)
        return
    section = sections.ranks(report)
    console = make_console(width=width)
    lacking = f"; {', '.join(missing)} missing (no report within {wait_s:g} s)" if missing else ""
    console.print(f"\nThe job: {len(ready)} of {world} ranks in {job}{lacking}", style="bold", markup=False)
    if section is not None:
        console.print(render_section(section))
    written = write_report_files(report, job, names=(REPORT_TEXT, REPORT_HTML))
    print(f"stepscope: wrote {job}/: {', '.join(written) or 'nothing'} (the job across its ranks, and the main "
          f"rank's full diagnosis; again: {again})", flush=True)
