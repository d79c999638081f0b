"""`stepscope report RUN_FOLDER_OR_REPORT_JSON`: render a saved report again (terminal, HTML, JSON)
without reading its trace; a tune's folder (or its tune.json) renders its ladder again."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from stepscope.commands.argtypes import positive_int
from stepscope.commands.inputs import load_report, load_telemetry
from stepscope.commands.output import outputs_to_stdout, write_output
from stepscope.errors import StepscopeError
from stepscope.model.tune import tune_from_json, tune_to_json
from stepscope.report import render
from stepscope.report.terminal import make_console
from stepscope.report.tune import TuneTerminalRenderer

TUNE_JSON = "tune.json"  # as commands/tune.py writes it (importing that module would load the tuner)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        description="Render a stepscope.report/1 file again, e.g. as one self-contained HTML page.",
    )
    p.add_argument("source", metavar="RUN_FOLDER_OR_REPORT_JSON",
                   help="a report.json written by `stepscope analyze --json` or `stepscope run`, or its run folder; "
                        "or a tune's folder or tune.json")
    p.add_argument("--html", metavar="FILE", help="write the report as one self-contained HTML page")
    p.add_argument("--json", metavar="FILE", help="write the report as stepscope.report/1 JSON ('-' for stdout)")
    p.add_argument("--width", type=positive_int, default=None, help="terminal width for the report")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    outputs_to_stdout(json=args.json, html=args.html)  # a bad output name is said before anything is read
    tune_json = _tune_json(Path(args.source))
    if tune_json is not None:
        return _tune(tune_json, args)
    report = load_report(args.source, traces_allowed=False)
    telemetry = load_telemetry(args.source)
    return _emit(args, lambda: render("terminal", report, telemetry=telemetry),
                 ("HTML report", lambda: render("html", report, telemetry=telemetry)),
                 ("JSON report", lambda: render("json", report)))


def _emit(args: argparse.Namespace, terminal: Callable[[], Any], html: tuple[str, Callable[[], bytes]],
          json: tuple[str, Callable[[], bytes]]) -> int:
    """The terminal view (unless quiet or only HTML is asked for), then the files asked for, each made only then."""
    to_stdout = outputs_to_stdout(json=args.json, html=args.html)
    if not args.quiet and not args.html:
        make_console(width=args.width, stderr=to_stdout).print(terminal())
    written = []
    for target, (what, make) in ((args.html, html), (args.json, json)):
        if target is not None:
            written.append(write_output(target, make(), what))
    paths = [p for p in written if p]
    if paths and not args.quiet:
        print(f"wrote {', '.join(paths)}", file=sys.stderr if to_stdout else sys.stdout)
    return 0


def _tune_json(path: Path) -> Path | None:
    """tune.json given, or a folder holding it and no report.json: a tune's result."""
    if path.is_dir() and (path / TUNE_JSON).is_file() and not (path / "report.json").is_file():
        return path / TUNE_JSON
    return path if path.name == TUNE_JSON and path.is_file() else None


def _tune(path: Path, args: argparse.Namespace) -> int:
    try:
        tune = tune_from_json(path.read_bytes())
    except (OSError, msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError) as exc:
        raise StepscopeError(f"{path}: not a readable stepscope tune result ({exc})") from None

    def page() -> bytes:
        patch = path.parent / tune.patch if tune.patch else None
        patch_text = patch.read_text(encoding="utf-8") if patch is not None and patch.is_file() else None
        return render("tune-html", tune, patch_text=patch_text)

    return _emit(args, lambda: TuneTerminalRenderer().render(tune), ("tune page", page),
                 ("tune result", lambda: tune_to_json(tune)))
