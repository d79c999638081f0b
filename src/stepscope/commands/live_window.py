"""The live window as capture options, for `stepscope watch`'s flags: the live engine's LIVE_WINDOW (the options the
language server's and watch's `stepscope run` children get) parsed by `stepscope run`'s own options, so the window is
declared once; and capture options spelled back for the child."""

from __future__ import annotations

import argparse

from stepscope.capture.options import CaptureOptions
from stepscope.commands.run import add_capture_options, options_from_args
from stepscope.live.engine import LIVE_WINDOW


def live_window() -> CaptureOptions:
    """LIVE_WINDOW as `stepscope run` reads it."""
    parser = argparse.ArgumentParser(add_help=False)
    add_capture_options(parser)
    parser.add_argument("program", nargs="*")
    return options_from_args(parser.parse_args(list(LIVE_WINDOW)))


def run_options(o: CaptureOptions) -> tuple[str, ...]:
    """The capture's window and settings spelled for `stepscope run`, every one explicit (the child's defaults are
    not the live window's)."""
    opts = ["--skip", str(o.skip), "--warmup", str(o.warmup), "--steps", str(o.steps),
            "--reference-steps", str(o.reference_steps),
            "--telemetry-interval", str(o.telemetry_interval if o.telemetry else 0),
            "--record-shapes" if o.record_shapes else "--no-record-shapes"]
    if o.step_on:
        opts += ["--step-on", o.step_on]
    if o.batch_size:
        opts += ["--batch-size", str(o.batch_size)]
    if o.profile_memory is not None:
        opts.append("--profile-memory" if o.profile_memory else "--no-profile-memory")
    opts += [flag for flag, on in (("--with-stack", o.with_stack), ("--no-attribution", not o.attribution),
                                   ("--no-timing-pass", not o.timing_pass),
                                   ("--no-calibrate", not o.calibrate)) if on]
    return tuple(opts)
