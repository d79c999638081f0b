"""`stepscope lsp`: the language server over stdio (stepscope.live.lsp) that shows each line's cost in the editor;
docs/editor.md says how to start it from VS Code, Neovim, Helix and Emacs."""

from __future__ import annotations

import argparse

from stepscope.errors import StepscopeError

# pygls is the optional `lsp` extra: without it this module cannot load, and the verb table says what to install
# (cli.OPTIONAL); the verb table loads this module only when `stepscope lsp` runs.
from stepscope.live.lsp import serve

DEBOUNCE_S = 0.5


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "lsp",
        description="A language server over stdin and stdout: on each save of a training script (or of any Python "
                    "file, when initializationOptions name the program) it profiles the script in a fresh process "
                    "and shows each line's forward and backward time as inlay hints, the lines that sync with the "
                    "device as diagnostics and the verdict as a code lens on the training loop. Started by the "
                    "editor, not by hand: see docs/editor.md.",
    )
    p.add_argument("--stdio", action="store_true", help="accepted for editors that pass it (stdio is the only "
                                                         "transport)")
    p.add_argument("--debounce", type=float, default=DEBOUNCE_S, metavar="S",
                   help=f"seconds without another save before profiling ({DEBOUNCE_S}); initializationOptions' "
                        "\"debounce\" overrides it")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    if args.debounce < 0:
        raise StepscopeError(f"--debounce {args.debounce}: must be 0 or more seconds", exit_code=2)
    serve(args.debounce)
    return 0
