"""`stepscope analyze PATH [PATH ...]`: read traces, print the diagnosis, optionally write JSON."""

from __future__ import annotations

import argparse
import sys

from stepscope.commands.output import write_output


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyze",
        help="analyse PyTorch profiler traces, rank folders or Nsight Systems exports",
        description="Read traces and explain where every step's time goes, and why.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="a Kineto trace (.json/.json.gz), a folder of per-rank traces, or an nsys .sqlite/.nsys-rep")
    p.add_argument("--json", metavar="FILE", help="also write the report as stepscope.report/1 JSON ('-' for stdout)")
    p.add_argument("--step-range", metavar="NAME", help="the range (NVTX or record_function) that marks one step")
    p.add_argument("--batch-size", type=int, metavar="N", help="samples per step, to report samples/s")
    p.add_argument("--width", type=int, default=None, help="terminal width for the report")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors (with --json)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from stepscope.pipeline import analyze
    from stepscope.report import render
    from stepscope.report.terminal import make_console

    report = analyze(args.paths, step_range=args.step_range, batch_size=args.batch_size)
    to_stdout = args.json == "-"
    console = make_console(width=args.width, stderr=to_stdout)
    if not args.quiet:
        console.print(render("terminal", report))
    written = []
    if args.json:
        path = write_output(args.json, render("json", report), "JSON report")
        if path:
            written.append(path)
    if written and not args.quiet:
        print(f"wrote {', '.join(written)}", file=sys.stderr if to_stdout else sys.stdout)
    return 0
