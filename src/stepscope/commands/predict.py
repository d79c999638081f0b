"""`stepscope predict TRACE|RUN_FOLDER|report.json --gpu GPUS`: this job's step time on other GPUs, what it would
cost, and the energy it takes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from stepscope.commands.argtypes import positive_float, positive_int
from stepscope.commands.inputs import is_report_file, load_report, load_telemetry
from stepscope.commands.output import outputs_to_stdout, write_output
from stepscope.commands.predict_options import add_cost_options, request_from_args
from stepscope.errors import StepscopeError
from stepscope.model.runfolder import REPORT_JSON, TRACE
from stepscope.model.telemetry import TelemetryReport, WindowSummary
from stepscope.pipeline import analyze
from stepscope.predict.energy import window_power
from stepscope.report import render
from stepscope.report.sections import prediction
from stepscope.report.terminal import make_console, render_section


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        description="Predict the step time of a traced job on other GPUs from its trace: each GPU kernel scaled by "
                    "the roof that bounds it, the step replayed with the host as measured. See docs/predict.md.",
    )
    p.add_argument("path", metavar="TRACE|RUN_FOLDER|report.json",
                   help="a Kineto trace, a `stepscope run` folder, or a report.json whose trace is still there")
    p.add_argument("--gpu", required=True, metavar="GPUS",
                   help="target GPUs, comma-separated ids or aliases from the hardware table: h100,h200,a100-80gb,l4")
    add_cost_options(p)
    p.add_argument("--samples-per-epoch", type=positive_int, metavar="N", help="samples per epoch, for cost per epoch")
    p.add_argument("--steps-per-epoch", type=positive_int, metavar="N", help="steps per epoch, for cost per epoch")
    p.add_argument("--batch-size", type=positive_int, metavar="N",
                   help="samples per step (default: what the run recorded), for samples/s and cost per sample")
    p.add_argument("--host-speed", type=positive_float, default=1.0, metavar="X",
                   help="the target machine runs host code X times as fast as the one traced (default 1: the same)")
    p.add_argument("--step-range", metavar="NAME", help="the range (NVTX or record_function) that marks one step")
    p.add_argument("--json", metavar="FILE", help="also write the report, with its prediction, as JSON ('-': stdout)")
    p.add_argument("--html", metavar="FILE", help="also write the report, with its prediction, as an HTML page")
    p.add_argument("--width", type=positive_int, default=None, help="terminal width")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")
    p.set_defaults(handler=run)


def _inputs(path: Path) -> tuple[Path, WindowSummary | None, int | None]:
    """The trace to read, the run's telemetry window (for power) and its batch size, from what the user gave."""
    if not path.exists():
        raise StepscopeError(f"{path}: no such file or folder")
    if path.is_dir() and (path / TRACE).is_file():
        report = load_report(path / REPORT_JSON, traces_allowed=False) if (path / REPORT_JSON).is_file() else None
        return path / TRACE, _window(load_telemetry(path), report), _batch(report)
    if is_report_file(path):
        report = load_report(path, traces_allowed=False)
        return _trace_of(report, path), _window(load_telemetry(path), report), _batch(report)
    return path, _window(load_telemetry(path), None), None


def origin_power(path: str | Path) -> float | None:
    """Mean GPU power over the telemetry window of the run a trace comes from (telemetry.json beside it)."""
    return window_power(_window(load_telemetry(path), None))


def _trace_of(report: Any, path: Path) -> Path:
    """The trace a saved report was made from: beside it in its run folder, else its recorded path."""
    candidates = [path.parent / TRACE, *(Path(p) for p in report.source.paths),
                  *(path.parent / Path(p).name for p in report.source.paths)]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise StepscopeError(f"{path}: the trace this report was made from is not there "
                             f"({', '.join(report.source.paths) or 'no path recorded'})",
                             hint="predict reads the trace: give the trace file or its run folder")
    return found


def _window(telemetry: TelemetryReport | None, report: Any) -> WindowSummary | None:
    if telemetry is not None and telemetry.window is not None:
        return telemetry.window
    run = getattr(report, "run", None)
    return run.telemetry if run is not None else None


def _batch(report: Any) -> int | None:
    run = getattr(report, "run", None)
    return run.batch_size if run is not None else None


def run(args: argparse.Namespace) -> int:
    to_stdout = outputs_to_stdout(json=args.json, html=args.html)
    request = request_from_args(args, args.gpu)
    trace_path, window, batch = _inputs(Path(args.path))
    report = analyze(trace_path, step_range=args.step_range, batch_size=args.batch_size or batch, predict=request,
                     power_w=window_power(window))
    if report.prediction is None:
        reason = next((n for n in report.notes if n.startswith("no prediction: ")), "no prediction")
        raise StepscopeError(f"{trace_path}: {reason.removeprefix('no prediction: ')}")
    if not args.quiet:
        section = prediction(report)
        if section is not None:
            make_console(width=args.width, stderr=to_stdout).print(render_section(section))
    written = []
    if args.json is not None and (out := write_output(args.json, render("json", report), "JSON report")):
        written.append(out)
    if args.html is not None and (out := write_output(args.html, render("html", report), "HTML report")):
        written.append(out)
    if written and not args.quiet:
        print(f"wrote {', '.join(written)}", file=sys.stderr if to_stdout else sys.stdout)
    return 0
