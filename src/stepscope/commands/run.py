"""`stepscope run [options] script.py [args]` / `-m module [args]`: profile a program with no code change."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stepscope.api import prepare_folder
from stepscope.capture.launcher import Launch, launched
from stepscope.capture.options import DEFAULTS as D
from stepscope.capture.options import STEP_SOURCES, CaptureOptions, skipping
from stepscope.capture.program import Program, check
from stepscope.capture.runfolder import rank_folder
from stepscope.capture.runner import capture_program, require_torch
from stepscope.capture.signals import SigtermHandler
from stepscope.commands.argtypes import count, positive_int
from stepscope.commands.predict_options import add_predict_option, request_from_args
from stepscope.errors import StepscopeError
from stepscope.lifeline import follow_parent
from stepscope.model.runfolder import RUN_FILES


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        description="Run a script (or -m module) as python would, profile a window of its steps, and say why "
                    "it is slow. Everything after the script or module name belongs to the program; `--` may "
                    "come before it.",
        usage="stepscope run [options] [--] (script.py | -m module) [args ...]",
        # No abbreviations: the program's own options (`--n 12`) would otherwise be matched against ours,
        # and an ambiguous prefix is an error even in the part that belongs to the program.
        allow_abbrev=False,
    )
    add_capture_options(p)
    p.add_argument("--full", action="store_true",
                   help="let the program run to its end after the window (always, under a launcher such as torchrun)")
    p.add_argument("-o", "--out", metavar="DIR",
                   help="the run folder (new or empty; default stepscope-runs/NAME-TIME); under a launcher "
                        "(torchrun), the job's folder, where each rank writes rank<N>/")
    p.add_argument("-f", "--force", action="store_true", help="let the files of an existing --out folder be replaced")
    p.add_argument("--width", type=positive_int, default=None, help="terminal width for the report")
    add_predict_option(p)
    p.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE ...",
                   help="run a library module as a script, like python -m")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="script.py [args ...]", help=argparse.SUPPRESS)
    p.set_defaults(handler=main)


def add_capture_options(p: argparse.ArgumentParser, d: CaptureOptions = D) -> None:
    """The options of a capture's window and settings, shared by `run` and `watch` (which forwards them)."""
    p.add_argument("--skip", type=count, default=None, metavar="N",
                   help=f"steps to run unprofiled first, exactly (default {d.skip}, and more, up to 2x, while the step "
                        "meter sees them still getting faster); counts the chosen steps")
    p.add_argument("--warmup", type=count, default=d.warmup, metavar="N",
                   help=f"profiled steps to discard ({d.warmup})")
    p.add_argument("--steps", type=positive_int, default=d.steps, metavar="N", help=f"steps to record ({d.steps})")
    p.add_argument("--step-on", choices=STEP_SOURCES, default=d.step_on, metavar="SOURCE",
                   help="what marks a step: " + "|".join(STEP_SOURCES) + " (default: the strongest one the "
                        "program shows, training boundaries first)")
    p.add_argument("--batch-size", type=positive_int, default=d.batch_size, metavar="N",
                   help="samples per step (default: the first dimension of the DataLoader's first batch)")
    p.add_argument("--record-shapes", action=argparse.BooleanOptionalAction, default=d.record_shapes,
                   help="record operator input shapes, which the FLOP count (MFU, roofline) needs (default: on)")
    p.add_argument("--profile-memory", action=argparse.BooleanOptionalAction, default=d.profile_memory,
                   help="record allocator events (default: on when a GPU is profiled)")
    p.add_argument("--with-stack", action="store_true", default=d.with_stack,
                   help="record Python stacks (slower; falls back to no stacks if the profiler fails on them)")
    p.add_argument("--no-attribution", dest="attribution", action="store_false", default=d.attribution,
                   help="no time-by-source-line ranges in the recorded steps (they cost a few µs per torch call)")
    p.add_argument("--telemetry-interval", type=float, default=d.telemetry_interval if d.telemetry else 0,
                   metavar="S", help=f"seconds between CPU/GPU telemetry readings ({d.telemetry_interval}; "
                                     "0 turns telemetry off)")
    p.add_argument("--no-timing-pass", dest="timing_pass", action="store_false", default=d.timing_pass,
                   help="record one window with every setting instead of a minimal timing pass before it (the "
                        "replay then takes the step's timeline from the costlier trace: docs/capture.md)")
    p.add_argument("--reference-steps", type=count, default=d.reference_steps, metavar="N",
                   help=f"unprofiled steps timed after the window, for the profiler's overhead ({d.reference_steps})")
    p.add_argument("--no-calibrate", dest="calibrate", action="store_false", default=d.calibrate,
                   help="do not measure the profiler's cost per event after the window (~1-3 s; the replay then "
                        "takes out the default cost per event, sized to the gap to the unprofiled steps)")


def options_from_args(args: argparse.Namespace) -> CaptureOptions:
    interval = args.telemetry_interval
    if interval < 0:
        raise StepscopeError("--telemetry-interval must be 0 (off) or more")
    return CaptureOptions(**skipping(args.skip), warmup=args.warmup, steps=args.steps, step_on=args.step_on,
                          batch_size=args.batch_size, record_shapes=args.record_shapes,
                          profile_memory=args.profile_memory, with_stack=args.with_stack,
                          attribution=args.attribution, telemetry=interval > 0,
                          telemetry_interval=interval if interval > 0 else 0.2,
                          reference_steps=args.reference_steps, timing_pass=args.timing_pass,
                          calibrate=args.calibrate)


def program_from_args(args: argparse.Namespace) -> Program:
    program = list(args.program)
    if args.module is None and program[:1] == ["--"]:  # `stepscope run [options] -- script.py ...`
        program = program[1:]
        if program[:1] == ["-m"]:
            args.module, program = program[1:], []
    if args.module is not None:
        if not args.module:
            raise StepscopeError("-m needs a module name", hint="stepscope run -m package.module [args]")
        # argparse hands a `--` after the module name to the script's slot: it is the module's argument.
        return Program(args.module[0], (*args.module[1:], *program), module=True)
    if not program:
        raise StepscopeError("nothing to run", hint="stepscope run [options] script.py [args], or -m module [args]")
    return Program(program[0], tuple(program[1:]))


def main(args: argparse.Namespace) -> int:
    follow_parent()  # a capture of watch or lsp ends with its front end, even one killed with SIGKILL
    program = program_from_args(args)
    spec = options_from_args(args)
    request = request_from_args(args, args.predict)
    check(program)
    require_torch()
    launch = launched()
    # Under a launcher each rank writes rank<N>/ in one job folder (--out names that folder).
    out = rank_folder(program.name, launch.job, launch.rank, args.out) if launch is not None else args.out
    folder = prepare_folder(out, args.force, program.name)
    if args.force:
        _clear_run_files(folder)
    # Under a launcher the program always runs on: a rank that stopped would fail the next collective of the others.
    full = args.full or launch is not None
    print(f"stepscope: {_first_line(program, spec, full, launch)}", file=sys.stderr, flush=True)
    # SIGTERM (timeout, SLURM, Kubernetes) and SIGHUP (a closed terminal) as SIGINT: raised in the program, then
    # only remembered while the capture is exported and the reports written; the run then ends with 143 or 129.
    with SigtermHandler(raising=False) as sigterm:
        captured = capture_program(program, spec, folder, full=full, sigterm=sigterm)
        # The analyses, the pipeline and the renderers load only now that the program has ended: it ran in this
        # process, which held nothing of them while it did (tests/test_imports.py checks it).
        from stepscope.commands.run_finish import finish

        sys.stdout.flush()
        code = finish(program, spec, folder, captured, width=args.width, predict=request,
                      launch=None if sigterm.received else launch)
    return sigterm.exit_code if sigterm.received else code


def _clear_run_files(folder: Path) -> None:
    """--force: the files a run writes are replaced, not mixed with a previous run's (others are left alone)."""
    for name in RUN_FILES:
        (folder / name).unlink(missing_ok=True)


def _first_line(program: Program, spec: CaptureOptions, full: bool, launch: Launch | None) -> str:
    """What the run will do: its window and, under a launcher, why the window is the same on every rank and why the
    program runs on after it."""
    steps_on = f"{spec.step_on} " if spec.step_on else ""
    passes = "twice (a timing pass, then the recorded pass)" if spec.timing_pass else "once"
    skip = f"skip {spec.skip}" + (" (exactly: the same steps on every rank)" if launch and not spec.settle else "")
    if launch is None:
        after = "" if full else ", then stop"
    else:
        after = ", then let the program run on to its end (stopping one rank would break the others' collectives)"
    rank = f"rank {launch.rank} of {launch.world_size}: " if launch is not None else ""
    return (f"{rank}running {' '.join(program.command)}: {skip}, then {passes} warm up {spec.warmup} and record "
            f"{spec.steps} {steps_on}steps{after}")
