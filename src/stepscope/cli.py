"""The command line: a thin dispatcher to one module per verb; the only place errors become one line."""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from stepscope import process
from stepscope.errors import StepscopeError
from stepscope.version import __version__

# The verbs, each in its own module, which imports what it needs at its top: only the verb that runs is loaded,
# so `stepscope run` loads no analysis before the user's program has run, and the CLI starts fast.
VERBS = {  # each verb and its line in `stepscope --help`
    "analyze": "analyse PyTorch profiler traces, rank folders or Nsight Systems exports",
    "run": "run a PyTorch script or module under the profiler and diagnose it",
    "report": "render a saved report (report.json or a stepscope run folder) as terminal text or HTML",
    "diff": "compare two runs: step time, breakdown, patterns, kernels and lines that changed",
    "predict": "predict this job's step time, cost and energy on other GPUs",
    "watch": "re-profile a script on each save and show what changed (terminal, and a live page with --page)",
    "lsp": "a language server: each line's cost in the editor as you save (VS Code, Neovim, Helix, Emacs)",
    "tune": "try the recommended fixes on a script, measure each, keep what is really faster",
}
ALIASES = {"analyse": "analyze"}


def _verb_module(name: str):
    # A verb's modules make tens of thousands of lasting objects and no garbage: the collector, run every few hundred
    # allocations, would only walk them (a few ms of `analyze`'s start).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with process.dataclass_code_cached():
            return importlib.import_module(f"stepscope.commands.{name}")  # the lazy verb table
    finally:
        process.loaded()
        if was_enabled:
            gc.enable()


def requested_verb(argv: Sequence[str]) -> str | None:
    """The verb the command line names (its first word that is not an option), if it is one of ours."""
    first = next((a for a in argv if not a.startswith("-")), None)
    verb = ALIASES.get(first or "", first)
    return verb if verb in VERBS else None


def build_parser(verb: str | None = None, *, every_verb: bool = False) -> argparse.ArgumentParser:
    """The command line's parser: `verb`'s in full (every verb's with `every_verb`), the others listed with their
    line of help (`stepscope --help` and `--version` load no verb)."""
    parser = argparse.ArgumentParser(
        prog="stepscope",
        description="Find out why a PyTorch job is slow, which fix to apply, and where.",
    )
    parser.add_argument("--version", action="version", version=f"stepscope {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND")
    for name, line in VERBS.items():
        if name != verb and not every_verb:
            sub.add_parser(name, help=line, aliases=[a for a, v in ALIASES.items() if v == name])
            continue
        try:
            module = _verb_module(name)
        except Exception as exc:  # a broken verb stays listed, and says why when it is run
            _add_broken_verb(sub, name, exc)
            continue
        module.add_parser(sub)
    return parser


# Third-party modules of the optional extras (pyproject.toml): a verb that needs a missing one says what to install.
OPTIONAL = {"pygls": "lsp", "lsprotocol": "lsp", "watchfiles": "watch", "IPython": "notebook", "torch": "torch"}


def _add_broken_verb(sub: argparse._SubParsersAction, verb: str, error: Exception) -> None:
    why = f"{type(error).__name__}: {error}"
    missing = (getattr(error, "name", None) or "").split(".")[0] if isinstance(error, ModuleNotFoundError) else ""
    extra = OPTIONAL.get(missing)

    def fail(args: argparse.Namespace) -> int:
        if extra is not None:
            raise StepscopeError(f"stepscope {verb} needs {missing}, which is not installed",
                                 hint=f"pip install 'stepscope[{extra}]'", exit_code=1)
        raise StepscopeError(f"the {verb} command cannot load ({why})",
                             hint="this is a bug in stepscope or its installation; reinstall it or report it",
                             exit_code=1)

    p = sub.add_parser(verb, help=f"(needs the '{extra}' extra)" if extra else f"(cannot load: {why})")
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.set_defaults(handler=fail)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(requested_verb(argv))
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


# Verbs that run none of the user's code: nothing of the user's waits for the interpreter's last collection.
READ_ONLY_VERBS = frozenset({"analyze", "report", "diff", "predict"})


def entry() -> NoReturn:
    """The `stepscope` command and `python -m stepscope`: main(), then the exit; for a verb that only reads files, in a
    process set up for it (stepscope.process)."""
    read_only = requested_verb(sys.argv[1:]) in READ_ONLY_VERBS
    if read_only:
        process.for_reading()
    code = main()
    if read_only:
        process.before_exit()
    sys.exit(code)


if __name__ == "__main__":
    entry()
