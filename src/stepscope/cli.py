"""The command line: a thin dispatcher to one module per verb; the only place errors become one line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from stepscope.errors import StepscopeError
from stepscope.version import __version__

VERBS = ("analyze", "run", "report", "diff", "predict", "tune")


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
        except Exception as exc:  # a broken verb stays listed, and says why when it is run
            _add_broken_verb(sub, verb, exc)
            continue
        module.add_parser(sub)
    return parser


def _add_broken_verb(sub: argparse._SubParsersAction, verb: str, error: Exception) -> None:
    why = f"{type(error).__name__}: {error}"

    def fail(args: argparse.Namespace) -> int:
        raise StepscopeError(f"the {verb} command cannot load ({why})",
                             hint="this is a bug in stepscope or its installation; reinstall it or report it",
                             exit_code=1)

    p = sub.add_parser(verb, help=f"(cannot load: {why})")
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.set_defaults(handler=fail)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # said by the verb's own parser, whose usage is the one that helps
        verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        verb_parser = verbs.choices.get(getattr(args, "verb", None) or "", parser)
        verb_parser.error(f"unrecognized arguments: {' '.join(extras)}")
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
