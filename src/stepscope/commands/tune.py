"""`stepscope tune [options] script.py [args]` / `-m module [args]`: try the fixes the diagnosis calls for on the
unmodified program, measure each, keep what is really faster."""

from __future__ import annotations

import argparse
import re
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope.atomic import write_atomic
from stepscope.capture import runfolder
from stepscope.capture.program import check
from stepscope.capture.runner import require_torch
from stepscope.commands.argtypes import count, positive_int
from stepscope.commands.run import program_from_args
from stepscope.model.tune import Tune, tune_to_json
from stepscope.report import render
from stepscope.report.terminal import make_console
from stepscope.report.tune import TuneTerminalRenderer, ladder_rich, progress_line, trial_label
from stepscope.tune.fixes import FIXES, known_ids
from stepscope.tune.ladder import Events, TuneOptions, Tuner

if TYPE_CHECKING:
    from rich.console import Console

TUNE_JSON, TUNE_TEXT, TUNE_HTML = "tune.json", "tune.txt", "tune.html"
TEXT_WIDTH = 120  # tune.txt is read in editors, not a terminal (report.txt likewise has a fixed width)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune",
        description="Measure the program as it is, diagnose it, then try each fix the diagnosis calls for in a fresh "
                    "process running the unmodified program with the fix applied from outside; keep the fixes "
                    "faster beyond the noise, and write them as a patch. Everything after the script or module "
                    "name belongs to the program.",
        usage="stepscope tune [options] (script.py | -m module) [args ...]",
        allow_abbrev=False,  # the program's own options must not be matched against ours
    )
    p.add_argument("--budget", type=_duration, default=600.0, metavar="TIME",
                   help="time for the whole tune, e.g. 90s, 15m, 1h (10m)")
    p.add_argument("--max-trials", type=positive_int, metavar="N", help="at most N trials")
    fixes = p.add_argument("--fixes", type=_ids, metavar="IDS", help="only these fixes (comma-separated): %(ids)s")
    fixes.ids = _FixIds()  # type: ignore[attr-defined]  # argparse formats help with the action's attributes
    p.add_argument("--skip-fixes", type=_ids, default=(), metavar="IDS", help="never these fixes")
    p.add_argument("--trial-steps", type=positive_int, default=20, metavar="N",
                   help="steps timed per run, at least (20)")
    p.add_argument("--windows", type=positive_int, default=3, metavar="N",
                   help="windows the timed steps of a run are split in, each synchronised with the device at its "
                        "ends (3)")
    p.add_argument("--min-gain", type=_percent, default=0.05, metavar="PCT",
                   help="the smallest gain worth a change: a fix is kept when its gain's 95%% interval is above "
                        "1 + this (5%%)")
    p.add_argument("--max-rounds", type=positive_int, default=3, metavar="N",
                   help="runs of a candidate, alternating with the rung it builds on, while its gain is undecided "
                        "(3)")
    p.add_argument("--warmup-steps", type=count, default=3, metavar="N",
                   help="steps run before the timing starts: worker start-up, compilation, autotuning (3)")
    p.add_argument("--trial-seconds", type=float, default=2.0, metavar="S",
                   help="and time at least this long per run, if the program runs that long (2)")
    p.add_argument("--trial-timeout", type=_duration, metavar="TIME",
                   help="longest one run of a trial may take, compilation aside (default: 5x the baseline run, "
                        "at least 2m; a compiling fix's first run gets 5m more)")
    p.add_argument("--allow-batch-change", action="store_true",
                   help="also try bigger batches (larger_batch): this changes the optimisation")
    p.add_argument("--batch-size", type=positive_int, metavar="N",
                   help="samples per step (default: the first dimension of the DataLoader's first batch)")
    p.add_argument("--seed", type=int, default=0, help="the seed of random, numpy and torch in every trial (0)")
    p.add_argument("--no-final-diagnosis", dest="final_diagnosis", action="store_false",
                   help="do not profile the tuned configuration at the end")
    p.add_argument("--out", metavar="DIR", help="the tune folder (new or empty; default stepscope-runs/NAME-tune-TIME)")
    p.add_argument("--width", type=int, default=None, help="terminal width")
    p.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE ...",
                   help="tune a library module run as a script, like python -m")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="script.py [args ...]", help=argparse.SUPPRESS)
    p.set_defaults(handler=main)


def _duration(text: str) -> float:
    """90, 90s, 15m, 1.5h -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 15m, 1h)")
    value = float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


class _FixIds:
    """The registry's fix ids, as the help prints them (this verb's module is loaded only for `stepscope tune`)."""

    def __str__(self) -> str:
        return ", ".join(FIXES)


def _percent(text: str) -> float:
    """5, 5%, 0.05 -> 0.05."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(%?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r} (e.g. 5%)")
    value = float(match.group(1))
    value = value / 100 if match.group(2) or value >= 1 else value
    if value >= 1:
        raise argparse.ArgumentTypeError("must be under 100%")
    return value


def _ids(text: str) -> tuple[str, ...]:
    ids = tuple(i.strip() for i in text.split(",") if i.strip())
    unknown = [i for i in ids if i not in known_ids()]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown fix id {', '.join(unknown)}; known: {', '.join(sorted(FIXES))}")
    return ids


def main(args: argparse.Namespace) -> int:
    program = program_from_args(args)
    check(program)
    require_torch()
    options = TuneOptions(
        budget_s=args.budget, max_trials=args.max_trials, fixes=args.fixes, skip_fixes=tuple(args.skip_fixes),
        trial_steps=args.trial_steps, warmup_steps=args.warmup_steps, min_seconds=args.trial_seconds,
        trial_timeout_s=args.trial_timeout, allow_batch_change=args.allow_batch_change, batch_size=args.batch_size,
        seed=args.seed, final_diagnosis=args.final_diagnosis, windows=args.windows, min_gain=args.min_gain,
        max_rounds=args.max_rounds)
    folder = runfolder.new_run_folder(f"{program.name}-tune", args.out)
    console = _console(args.width)  # a pipe keeps to COLUMNS, as analyze does: the tables fit it
    view = _View(console, folder, options.budget_s)
    print(f"stepscope: tuning {' '.join(program.command)} within {options.budget_s:.0f} s; trials in {folder}",
          file=sys.stderr, flush=True)
    tuner = Tuner(program, options, folder, Events(phase=view.phase, changed=view.changed))
    try:
        with _sigterm_as_interrupt(), view:
            tune = tuner.run()
    finally:
        view.save(tuner.tune)
    return _finish(tune, folder, console)


def _console(width: int | None) -> Console:
    return make_console(width=width)


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the tune like Ctrl-C: the trial running is stopped and the table so far is written."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _View:
    """The tune as it goes: a live table with the current trial, elapsed time and budget left on a terminal,
    one line per phase and per trial otherwise; tune.json saved atomically after every change."""

    def __init__(self, console: Console, folder: Path, budget_s: float) -> None:
        self.console, self.folder, self.budget_s = console, folder, budget_s
        self.started = time.monotonic()
        self.phase_text = "starting"
        self.tune: Tune | None = None
        self.live: Any = None
        self._shown = 0

    def __enter__(self) -> _View:
        if self.console.is_terminal:
            from rich.live import Live

            self.live = Live(console=self.console, get_renderable=self._render, refresh_per_second=2, transient=True)
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()

    def _render(self) -> Any:
        from rich.console import Group

        parts: list[Any] = []
        if self.tune is not None and self.tune.baseline is not None:
            parts.append(ladder_rich(self.tune))
        parts.append(progress_line(self.phase_text, time.monotonic() - self.started, self.budget_s))
        return Group(*parts)

    def phase(self, text: str) -> None:
        self.phase_text = text
        if self.live is None:
            print(f"stepscope: {text}", file=sys.stderr, flush=True)

    def changed(self, tune: Tune) -> None:
        self.tune = tune
        self.save(tune)
        if self.live is None:
            for t in tune.trials[self._shown:]:
                print(f"stepscope:   rung {t.rung} {trial_label(t)}: {'kept' if t.accepted else 'not kept'}: "
                      f"{t.reason}", file=sys.stderr, flush=True)
            self._shown = len(tune.trials)

    def save(self, tune: Tune) -> None:
        write_atomic(self.folder / TUNE_JSON, tune_to_json(tune), what="tune result")


def _finish(tune: Tune, folder: Path, console: Console) -> int:
    from rich.console import Console as RichConsole

    renderable = TuneTerminalRenderer().render(tune)
    console.print(renderable)
    import io

    buffer = io.StringIO()
    RichConsole(file=buffer, width=TEXT_WIDTH, color_system=None, force_terminal=False).print(renderable)
    write_atomic(folder / TUNE_TEXT, buffer.getvalue(), what="tune table")
    patch = folder / tune.patch if tune.patch else None
    patch_text = patch.read_text(encoding="utf-8") if patch is not None and patch.is_file() else None
    written = [TUNE_JSON, TUNE_TEXT]
    try:
        write_atomic(folder / TUNE_HTML, render("tune-html", tune, patch_text=patch_text), what="tune page")
        written.append(TUNE_HTML)
    except Exception as exc:  # the page is a convenience: never let it cost the tune its other files
        print(f"stepscope: {TUNE_HTML} was not written ({type(exc).__name__}: {exc})", file=sys.stderr)
    if tune.patch:
        written.append(tune.patch)
    print(f"stepscope: wrote {folder}/: {', '.join(sorted(written))} (trials/: each trial's spec, result and output)",
          flush=True)
    return 130 if tune.status == "interrupted" else 0
