"""`stepscope watch [options] script.py [args]` / `-m module [args]`: re-profile the program on each save of it or of
the user's modules it imports, and show what changed (terminal, and a live page with --page)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import shutil
import signal
import tempfile
import threading
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.live import Live

from stepscope.capture.program import check
from stepscope.capture.signals import away_from, terminals
from stepscope.commands.argtypes import count
from stepscope.commands.live_window import live_window
from stepscope.commands.live_window import run_options as live_run_options
from stepscope.commands.output import streams_to_devnull
from stepscope.commands.run import add_capture_options, program_from_args
from stepscope.errors import StepscopeError
from stepscope.live.engine import Target
from stepscope.live.page import PageServer
from stepscope.live.terminal import render
from stepscope.live.watch import BatchFlag, WatchSession

LIVE_WINDOW = live_window()  # the live engine's window: watch's defaults
REFRESH_PER_S = 4
BATCH_FLAGS = ("--batch-size", "--batch_size", "--bs")  # taken as the program's batch option when it gives one


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "watch",
        description="Profile a short window of the program, then again on each save of the script or of your "
                    "modules it imports; show step time, samples/s, the verdict, the top fixes and what changed "
                    "per line since the previous run and the pinned baseline (the first run). Everything after "
                    "the script or module name belongs to the program. Ctrl-C ends it.",
        usage="stepscope watch [options] [--] (script.py | -m module) [args ...]",
        allow_abbrev=False,  # the program's own options must not be matched against ours
    )
    add_capture_options(p, LIVE_WINDOW)
    p.add_argument("--page", action="store_true", help="serve a live page on 127.0.0.1 (its address is printed)")
    p.add_argument("--port", type=count, default=0, help="the page's port (0: any free port)")
    p.add_argument("--batch-flag", metavar="FLAG",
                   help="the program's own batch-size option (e.g. --batch-flag=--batch-size): lets the page's "
                        "\"measure it\" run the program at another batch size (default: --batch-size, --batch_size "
                        "or --bs when the program's arguments give one)")
    p.add_argument("--debounce", type=float, default=0.3, metavar="S",
                   help="seconds without another save before re-profiling (0.3)")
    p.add_argument("--polling", action="store_true",
                   help="poll the files instead of the OS's file events (the default without watchfiles)")
    p.add_argument("--runs-dir", metavar="DIR",
                   help="where the run folders go (default: a temporary folder, removed at the end)")
    p.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE ...",
                   help="run a library module as a script, like python -m")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="script.py [args ...]", help=argparse.SUPPRESS)
    p.set_defaults(handler=main)


def run_options(args: argparse.Namespace) -> tuple[str, ...]:
    """The window and settings for each capture: the live window with the options given, spelled for `stepscope
    run` (every one explicit)."""
    if args.telemetry_interval < 0:
        raise StepscopeError("--telemetry-interval must be 0 (off) or more")
    window = LIVE_WINDOW.replace(
        skip=LIVE_WINDOW.skip if args.skip is None else args.skip,  # exact: each save's numbers come quickly
        warmup=args.warmup, steps=args.steps, reference_steps=args.reference_steps,
        telemetry=args.telemetry_interval > 0,
        telemetry_interval=args.telemetry_interval or LIVE_WINDOW.telemetry_interval,
        record_shapes=args.record_shapes, step_on=args.step_on or None, batch_size=args.batch_size or None,
        profile_memory=args.profile_memory, with_stack=bool(args.with_stack), attribution=bool(args.attribution),
        timing_pass=bool(args.timing_pass), calibrate=bool(args.calibrate))
    return live_run_options(window)


def main(args: argparse.Namespace) -> int:
    program = program_from_args(args)
    check(program)
    if args.debounce < 0:
        raise StepscopeError("--debounce must be 0 or more")
    if args.batch_flag is not None and not args.batch_flag.startswith("-"):
        raise StepscopeError(f"--batch-flag {args.batch_flag!r}: give the program's option, e.g. --batch-size")
    batch_flag = args.batch_flag or _batch_flag_in(program.args)
    cwd = Path.cwd()
    target = Target(tuple(program.command), cwd, run_options(args))
    script = None if program.module else Path(program.target).resolve()
    workdir = Path(args.runs_dir) if args.runs_dir else Path(tempfile.mkdtemp(prefix="stepscope-watch-"))
    session = WatchSession(target, workdir, script=script, debounce_s=args.debounce, polling=args.polling or None,
                           batch_flag=BatchFlag(batch_flag) if batch_flag else None)
    console = Console(stderr=False)
    page = None
    on_terminal = terminals()
    previous = {sig: signal.signal(sig, partial(_interrupt, on_terminal)) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        if args.page:
            try:
                page = PageServer(session, args.port).start()
            except OSError as exc:
                raise StepscopeError(f"cannot serve the page on 127.0.0.1:{args.port}: {exc.strerror}") from None
            console.print(f"stepscope: live page at {page.url}")
        console.print(f"stepscope: watching {' '.join(program.command)} and the modules beside it "
                      f"({session.watcher.backend}); Ctrl-C ends", highlight=False)
        _show(session, console)
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # the terminal closed (EIO) or the reader of stdout left (EPIPE): nobody sees the view
        if exc.errno not in (errno.EIO, errno.EPIPE):
            raise
        streams_to_devnull()  # the last lines go nowhere instead of raising again
    finally:
        session.close()
        if page is not None:
            page.close()
        if not args.runs_dir:
            shutil.rmtree(workdir, ignore_errors=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    with contextlib.suppress(OSError):  # a terminal gone without a hangup (EIO): the last line goes nowhere
        console.print("stepscope: watch ended")
    return 0


def _batch_flag_in(argv: tuple[str, ...]) -> str | None:
    """The program's batch-size option when its command line already gives one (`--batch-size 32`)."""
    for arg in argv:
        name = arg.split("=", 1)[0]
        if name in BATCH_FLAGS:
            return name
    return None


def _interrupt(on_terminal: list[int], signum: int, frame: object) -> None:
    """SIGTERM and SIGHUP (the terminal closed) end watch as Ctrl-C does: its captures run in sessions of their
    own, out of reach of the signals sent to watch's group, so they must be ended by watch itself. After a hangup
    the streams that were the terminal point at the null device: the last lines would fail with EIO."""
    if signum == signal.SIGHUP:
        away_from(on_terminal)
    raise KeyboardInterrupt


def _show(session: WatchSession, console: Console) -> None:
    """Draw the view on each change until Ctrl-C (the main thread waits here; the engine's threads notify)."""
    changed = threading.Event()
    session.listen(lambda version: changed.set())
    session.start()
    with Live(render(session.snapshot(), console.width), console=console, refresh_per_second=REFRESH_PER_S,
              transient=False) as live:
        while True:
            changed.wait(1.0 / REFRESH_PER_S)
            changed.clear()
            live.update(render(session.snapshot(), console.width))

