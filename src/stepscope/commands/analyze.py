"""`stepscope analyze PATH [PATH ...]`: read traces, print the diagnosis, optionally write JSON, HTML and
an annotated trace."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from stepscope.commands import ranks
from stepscope.commands.argtypes import positive_int
from stepscope.commands.output import going_on_when_reader_leaves, outputs_to_stdout, reader_may_leave, write_output
from stepscope.commands.predict import origin_power
from stepscope.commands.predict_options import add_predict_option, request_from_args
from stepscope.commands.progress import ReadingProgress
from stepscope.errors import StepscopeError
from stepscope.pipeline import AnalyzeOptions, analyze
from stepscope.ranks.inputs import rank_files
from stepscope.report import render
from stepscope.report.terminal import make_console
from stepscope.trace.kineto import document

if TYPE_CHECKING:
    from stepscope.analysis.facts import Facts
    from stepscope.model.report import Report


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyze", aliases=["analyse"],
        description="Read traces and explain where every step's time goes, and why.",
    )
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="a Kineto trace (.json/.json.gz), a folder of per-rank traces, or an nsys .sqlite/.nsys-rep; "
                        "also a quoted glob or a list file (@ranks.txt) of rank traces")
    p.add_argument("--json", metavar="FILE", help="also write the report as stepscope.report/1 JSON ('-' for stdout)")
    p.add_argument("--html", metavar="FILE", help="also write the report as one self-contained HTML page")
    p.add_argument("--perfetto", metavar="FILE",
                   help="also write the trace with stepscope's own tracks added, for ui.perfetto.dev (.json.gz)")
    p.add_argument("--step-range", metavar="NAME", help="the range (NVTX or record_function) that marks one step")
    p.add_argument("--batch-size", type=positive_int, metavar="N", help="samples per step, to report samples/s")
    p.add_argument("--width", type=positive_int, default=None, help="terminal width for the report")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors (with --json)")
    add_predict_option(p)
    ranks.add_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    to_stdout = outputs_to_stdout(json=args.json, html=args.html, perfetto=args.perfetto)
    request = request_from_args(args, args.predict)
    ranks.take_paths_from_ray(args)
    if not args.paths:
        raise StepscopeError("no trace given", hint="stepscope analyze TRACE_OR_FOLDER [...]")
    files = rank_files(args.paths)
    if args.perfetto and len(files) != 1:
        raise StepscopeError(f"--perfetto annotates one trace, and {len(files)} were given",
                             hint="give one rank's trace file, e.g. the slowest rank's")
    kept: list[Facts] = []  # only the annotated trace reads them again
    options = AnalyzeOptions(step_range=args.step_range, batch_size=args.batch_size, predict=request,
                             on_facts=kept.append if args.perfetto else None)
    if len(files) > 1:
        report = ranks.analyze_ranks(args, files, options, show_progress=not args.quiet and sys.stderr.isatty())
    else:
        power = origin_power(files[0]) if request is not None else None
        progress = ReadingProgress(files[0]) if not args.quiet and sys.stderr.isatty() else None
        try:
            report = analyze(args.paths, options.replace(power_w=power, read_progress=progress))
        finally:
            if progress is not None:
                progress.close()
    console = going_on_when_reader_leaves(make_console(width=args.width, stderr=to_stdout))
    if not args.quiet:
        console.print(render("terminal", report))
    ranks.warn(report, args.quiet)
    written = []
    if args.json is not None:
        path = write_output(args.json, render("json", report), "JSON report")
        if path:
            written.append(path)
    if args.html is not None and (path := write_output(args.html, render("html", report), "HTML report")):
        written.append(path)
    if kept:
        data = _annotated_trace(kept[0], report, compress=args.perfetto.endswith(".gz"))
        if path := write_output(args.perfetto, data, "annotated trace"):
            written.append(path)
    if written and not args.quiet:
        with reader_may_leave():
            print(f"wrote {', '.join(written)}", file=sys.stderr if to_stdout else sys.stdout, flush=True)
    return 0


def _annotated_trace(facts: Facts, report: Report, compress: bool) -> bytes:
    """The trace's own events (copied from its file when that is Chrome JSON) plus stepscope's tracks."""
    trace = facts.trace
    original = document(Path(trace.meta.path))[0] if trace.meta.format == "kineto" else None
    return render("perfetto", report, trace=trace, annotations=facts.annotations, original=original,
                  compress=compress)
