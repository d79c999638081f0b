"""The command line: a thin dispatcher to one module per verb; the only place errors become one line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from stepscope.errors import StepscopeError
from stepscope.version import __version__

VERBS = ("analyze", "run", "report", "diff", "predict")


def _verb_module(name: str):
    import importlib

    return importlib.import_module(f"stepscope.commands.{name}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stepscope",
        description="Find out why a PyTorch job is slow, which fix to apply, and where.",
    )
    parser.add_argument("--version", action="version", version=f"stepscope {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND")
    for verb in VERBS:
        try:
            module = _verb_module(verb)
        except ModuleNotFoundError:
            continue  # a verb whose module is not installed in this build
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "verb", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except StepscopeError as exc:
        print(f"stepscope: error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("stepscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
