"""`stepscope diff BEFORE AFTER`: what changed between two runs, and a gate for CI (--fail-if-slower)."""

from __future__ import annotations

import argparse
import math
import sys

from stepscope.commands.argtypes import positive_int
from stepscope.commands.inputs import load_report
from stepscope.commands.output import outputs_to_stdout, write_output
from stepscope.compare import compare, slower_by
from stepscope.errors import StepscopeError
from stepscope.model.diff import diff_to_json
from stepscope.report import render
from stepscope.report.diff import DiffTerminalRenderer
from stepscope.report.terminal import make_console


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diff",
        description="Compare BEFORE and AFTER (traces, rank folders, run folders or report.json files).",
    )
    p.add_argument("before", metavar="BEFORE", help="trace, rank folder, run folder or report.json")
    p.add_argument("after", metavar="AFTER", help="trace, rank folder, run folder or report.json")
    p.add_argument("--json", metavar="FILE", help="write the diff as stepscope.diff/1 JSON ('-' for stdout)")
    p.add_argument("--html", metavar="FILE", help="write the diff as one self-contained HTML page")
    p.add_argument("--fail-if-slower", type=_percentage, metavar="PCT",
                   help="exit with status 1 if AFTER's step time is more than PCT%% slower than BEFORE's and the "
                        "change is beyond the runs' noise (a run too short to know its noise is gated on PCT alone)")
    p.add_argument("--step-range", metavar="NAME", help="for traces: the range that marks one step")
    p.add_argument("--batch-size", type=positive_int, metavar="N",
                   help="for traces: samples per step, to compare samples/s")
    p.add_argument("--width", type=positive_int, default=None, help="terminal width")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors and the gate's verdict")
    p.set_defaults(handler=run)


def _percentage(text: str) -> float:
    """A finite percentage of 0 or more: NaN would make a gate that can never fail."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage of 0 or more (e.g. 5)")
    return value


def run(args: argparse.Namespace) -> int:
    to_stdout = outputs_to_stdout(json=args.json, html=args.html)
    before, after = (load_report(p, step_range=args.step_range, batch_size=args.batch_size)
                     for p in (args.before, args.after))
    diff = compare(before, after)
    if not args.quiet:
        make_console(width=args.width, stderr=to_stdout).print(DiffTerminalRenderer().render(diff))
    written = []
    if args.json is not None:
        written.append(write_output(args.json, diff_to_json(diff), "JSON diff"))
    if args.html is not None:
        written.append(write_output(args.html, render("diff-html", diff), "HTML diff"))
    paths = [p for p in written if p]
    if paths and not args.quiet:
        print(f"wrote {', '.join(paths)}", file=sys.stderr if to_stdout else sys.stdout)
    slower = slower_by(diff)
    if args.fail_if_slower is not None:
        if diff.mismatch:
            raise StepscopeError(f"cannot gate on step time: {diff.mismatch}", exit_code=1)
        if slower is None:
            raise StepscopeError("cannot gate on step time: a run has no steps", exit_code=1)
        if slower > args.fail_if_slower and diff.verdict != "within_noise":
            unknown = ", and the runs' noise is unknown (too few steps)" if diff.verdict == "inconclusive" else ""
            raise StepscopeError(f"AFTER is {slower:.1f}% slower than BEFORE (limit {args.fail_if_slower:g}%)"
                                 f"{unknown}", exit_code=1)
        if slower > args.fail_if_slower:  # the gate's verdict, printed under --quiet too
            print(f"AFTER is {slower:.1f}% slower than BEFORE, within the runs' noise: the gate passes",
                  file=sys.stderr)
    return 0
