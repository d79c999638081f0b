"""`stepscope report RUN_FOLDER_OR_REPORT_JSON`: render a saved report again (terminal, HTML, JSON)
without reading its trace."""

from __future__ import annotations

import argparse
import sys

from stepscope.commands.argtypes import positive_int
from stepscope.commands.inputs import load_report, load_telemetry
from stepscope.commands.output import write_output
from stepscope.report import render
from stepscope.report.terminal import make_console


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        description="Render a stepscope.report/1 file again, e.g. as one self-contained HTML page.",
    )
    p.add_argument("source", metavar="RUN_FOLDER_OR_REPORT_JSON",
                   help="a report.json written by `stepscope analyze --json` or `stepscope run`, or its run folder")
    p.add_argument("--html", metavar="FILE", help="write the report as one self-contained HTML page")
    p.add_argument("--json", metavar="FILE", help="write the report as stepscope.report/1 JSON ('-' for stdout)")
    p.add_argument("--width", type=positive_int, default=None, help="terminal width for the report")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    report = load_report(args.source, traces_allowed=False)
    telemetry = load_telemetry(args.source)
    to_stdout = args.json == "-"
    if not args.quiet and not args.html:
        make_console(width=args.width, stderr=to_stdout).print(render("terminal", report, telemetry=telemetry))
    written = []
    if args.html:
        written.append(write_output(args.html, render("html", report, telemetry=telemetry), "HTML report"))
    if args.json:
        written.append(write_output(args.json, render("json", report), "JSON report"))
    paths = [p for p in written if p]
    if paths and not args.quiet:
        print(f"wrote {', '.join(paths)}", file=sys.stderr if to_stdout else sys.stdout)
    return 0
