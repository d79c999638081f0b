"""What the trainer callbacks share: the options, and what to do with the report at the end."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from stepscope.api import Profile, write_report_files
from stepscope.errors import StepscopeError
from stepscope.model import report as s


@dataclass(frozen=True)
class CallbackOptions:
    skip: int = 5
    warmup: int = 2
    steps: int = 5
    out: str | Path | None = None  # a folder for the trace and report files; None keeps them in a temp folder
    batch_size: int | None = None  # default: from the trainer (its batch, or its arguments)
    stop: bool = False  # end training once the window is recorded
    print_report: bool = True
    record_shapes: bool = False
    profile_memory: bool | None = None
    with_stack: bool = False
    telemetry: bool = False
    attribution: bool = True

    def profile(self, source: str, rank: int = 0, world_size: int = 1) -> Profile:
        out = self.out
        if out is not None and world_size > 1:
            out = Path(out) / f"rank{rank}"
        return Profile(skip=self.skip, warmup=self.warmup, steps=self.steps, batch_size=self.batch_size, out=out,
                       record_shapes=self.record_shapes, profile_memory=self.profile_memory,
                       with_stack=self.with_stack, telemetry=self.telemetry, attribution=self.attribution,
                       source=source)


def finish(profile: Profile, options: CallbackOptions, *, show: bool) -> s.Report | None:
    """Stop the capture and analyse it; a capture that recorded nothing says why on stderr, never raises."""
    result = profile.stop()
    if result.trace_path is None:
        if show:
            from stepscope.api import nothing_recorded

            print(f"stepscope: {nothing_recorded(result, profile.spec)}", file=sys.stderr)
        return None
    try:
        report = profile.report
    except StepscopeError as exc:
        print(f"stepscope: {exc.message}", file=sys.stderr)
        return None
    if options.out is not None:
        write_report_files(report, result.trace_path.parent)
    if show and options.print_report:
        from stepscope.report import render
        from stepscope.report.terminal import make_console

        make_console().print(render("terminal", report))
    return report
