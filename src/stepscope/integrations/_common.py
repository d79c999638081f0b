"""What the trainer callbacks share: the options, and what to do with the report at the end."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope.api import Profile, program_name
from stepscope.capture.options import DEFAULTS, CaptureOptions, skipping
from stepscope.errors import StepscopeError
from stepscope.model import report as s
from stepscope.model import runfolder


@dataclass(frozen=True)
class CallbackOptions:
    """The capture options (CaptureOptions' fields and defaults) and the callbacks' own."""

    capture: CaptureOptions = DEFAULTS
    out: str | Path | None = None  # the run folder; None: a new stepscope-runs/NAME-TIME/, as `stepscope run`
    force: bool = False  # let an existing `out` folder's files be replaced
    stop: bool = False  # end training once the window is recorded
    print_report: bool = True

    @classmethod
    def from_kwargs(cls, **options: Any) -> CallbackOptions:
        """Split keyword options between the capture and the callback; an unknown name is an error."""
        capture_fields = {f.name for f in dataclasses.fields(CaptureOptions)} - {"step_on"}
        own = {f.name for f in dataclasses.fields(cls)} - {"capture"}
        unknown = set(options) - capture_fields - own
        if unknown:
            raise TypeError(f"unknown stepscope callback option(s): {', '.join(sorted(unknown))}")
        given = {k: v for k, v in options.items() if k in capture_fields}
        capture = DEFAULTS.replace(step_on="marker", **{**skipping(given.pop("skip", None)), **given})
        return cls(capture=capture, **{k: v for k, v in options.items() if k in own})

    def profile(self, source: str, rank: int = 0, world_size: int = 1) -> Profile:
        out = self.out
        if out is not None and world_size > 1:
            out = Path(out) / f"rank{rank}"
        name = program_name() + (f"-rank{rank}" if world_size > 1 else "")
        return Profile(self.capture, out=out, force=self.force, source=source, name=name)


def as_loader(obj: Any) -> Any:
    """`obj` when it is a DataLoader (trainers may hold a list or a combined loader instead), else None."""
    torch_data = sys.modules.get("torch.utils.data")
    return obj if torch_data is not None and isinstance(obj, torch_data.DataLoader) else None


def finish(profile: Profile, options: CallbackOptions, *, show: bool) -> s.Report | None:
    """Stop the capture, analyse it and write the run folder; a capture that recorded nothing says why on
    stderr, never raises."""
    # The analysis loads only now, after training: the trainer's process held nothing of it while it ran.
    from stepscope import runreport

    result = profile.stop()
    if result.trace_path is None:
        if show:
            print(f"stepscope: {runreport.nothing_recorded(result, profile.spec)}", file=sys.stderr)
        return None
    try:
        written = profile.write_files()
    except StepscopeError as exc:
        print(f"stepscope: {exc.message}", file=sys.stderr)
        return None
    report = profile.report
    if show and options.print_report:
        files = ", ".join([runfolder.TRACE, *written])
        runreport.print_report(report, f"stepscope: wrote {profile.folder}/: {files}")
    return report
