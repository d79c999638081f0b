"""What `stepscope run` does once the program has ended: write telemetry.json, analyse the trace through the
pipeline, write the run folder's reports, print the diagnosis, choose the exit code."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from stepscope.atomic import write_atomic
from stepscope.capture.launcher import Launch
from stepscope.capture.options import CaptureOptions
from stepscope.capture.program import Program
from stepscope.capture.runner import Captured
from stepscope.commands.run_job import job_report
from stepscope.errors import StepscopeError
from stepscope.model import runfolder
from stepscope.model.meter import MeterRecord
from stepscope.model.telemetry import telemetry_to_json
from stepscope.pipeline import meter_section
from stepscope.predict import PredictRequest
from stepscope.report import render
from stepscope.report.terminal import make_console
from stepscope.runreport import WRITE_HINT, live_report, nothing_recorded, write_report_files


def finish(program: Program, spec: CaptureOptions, folder: Path, captured: Captured, *, width: int | None,
           predict: PredictRequest | None = None, launch: Launch | None = None) -> int:
    """Once the program has ended: telemetry.json, the analysis of the trace, the report files, the terminal
    report and the exit code (the program's own when it failed; 2 when nothing could be analysed); on rank 0 of a
    job under a launcher, then the job across its ranks (commands/run_job.py)."""
    code = _finish_rank(program, spec, folder, captured, width=width, predict=predict)
    if launch is not None and launch.rank == 0:
        job_report(folder.parent, launch.world_size, width)
    return code


def _finish_rank(program: Program, spec: CaptureOptions, folder: Path, captured: Captured, *, width: int | None,
                 predict: PredictRequest | None) -> int:
    outcome, result, telemetry = captured.outcome, captured.result, captured.telemetry
    files = [p for p in (result.trace_path and runfolder.TRACE,) if p]
    files += [name for name in (runfolder.TIMING, runfolder.CALIBRATION, runfolder.METER) if (folder / name).is_file()]
    if telemetry is not None:
        try:
            write_atomic(folder / runfolder.TELEMETRY, telemetry_to_json(telemetry), what="telemetry",
                         hint=WRITE_HINT)
            files.append(runfolder.TELEMETRY)
        except StepscopeError as exc:
            print(f"stepscope: {exc.message}\n  hint: {exc.hint}", file=sys.stderr)
    if (folder / runfolder.CENSUS).exists():
        files.append(runfolder.CENSUS)
    report, problem = None, None
    if result.trace_path is not None:
        planned = [*files, runfolder.REPORT_JSON, runfolder.REPORT_TEXT, runfolder.REPORT_HTML]
        try:
            report = live_report(result, spec, command=program.command, exit_code=outcome.exit_code,
                                 program_status=outcome.status, telemetry=telemetry, folder=folder,
                                 files=sorted(planned), predict=predict, meter=captured.meter)
        except StepscopeError as exc:
            problem = f"the trace could not be analysed: {exc.message}"
        except Exception as exc:  # a bug in the analysis must not cost the run its files
            if os.environ.get("STEPSCOPE_DEBUG"):  # a developer's run: the traceback too
                traceback.print_exc()
            problem = (f"analysing the trace failed ({type(exc).__name__}: {exc}); the trace is kept: "
                       f"stepscope analyze {result.trace_path}")
    else:
        problem = nothing_recorded(result, spec)
    measured = meter_line(captured.meter, result.step_source) if report is None else None
    console = make_console(width=width)
    if report is not None:
        files += write_report_files(report, folder, telemetry=telemetry)
        console.print(render("terminal", report, telemetry=telemetry))
    if outcome.failed:
        print(f"stepscope: the program {outcome.detail or 'failed'}; kept what was captured before it ended",
              file=sys.stderr)
    if problem:
        print(f"stepscope: {problem}", file=sys.stderr)
    if measured:
        print(f"stepscope: {measured}", flush=True)
    written = ", ".join(sorted(files)) if files else "nothing but the empty folder"
    print(f"stepscope: wrote {folder}{'/' if files else ''}: {written}", flush=True)
    if outcome.failed:
        return outcome.exit_code
    return 0 if report is not None else 2



def meter_line(record: MeterRecord | None, source: str | None) -> str | None:
    """What the step meter measured when there is no report (the program ended before the window): the step time
    and its phases, unprofiled."""
    meter = meter_section(record)
    if meter is None:
        return None
    phases = ", ".join(f"{p.name} {p.share:.0%}" for p in meter.phases if p.share >= 0.005)
    rate = f", {meter.samples_per_s:,.1f} samples/s" if meter.samples_per_s else ""
    return (f"measured unprofiled: {meter.step_us / 1e3:.2f} ms per {meter.source or source or ''} step{rate} "
            f"(mean of {meter.steps} steps; {phases}); meter.json has every step")
