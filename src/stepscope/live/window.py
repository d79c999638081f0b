"""The one window every live front end profiles (`stepscope watch`, `stepscope lsp`): the same program gives the
same figures in both, and each spells it for the `stepscope run` child the same way."""

from __future__ import annotations

from stepscope.capture.options import CaptureOptions

# A short window: the first figures quickly, lines and modules from three recorded steps. One recorded pass (no
# timing pass) halves the capture; memory is profiled for the per-line memory and the batch control's model. No
# calibration of the profiler's cost (1-3 s): the step meter measures the job itself, and the replay sizes the
# default cost per event to the gap between the recorded steps and the meter's.
LIVE_WINDOW = CaptureOptions(skip=3, warmup=1, steps=3, timing_pass=False, profile_memory=True,
                             reference_steps=5, calibrate=False)


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
