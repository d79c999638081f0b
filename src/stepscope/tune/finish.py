"""Profiled runs of a configuration (the diagnosis of the program as it is, and of the tuned configuration), and
the kept fixes written as `suggested.patch`."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from stepscope.atomic import write_atomic
from stepscope.model.report import Report, from_json
from stepscope.model.tune import Tune
from stepscope.tune.fixes import FIXES
from stepscope.tune.measured import Run
from stepscope.tune.review import Patch
from stepscope.tune.suggest import suggest
from stepscope.tune.trial import run_child
from stepscope.tune.wire import ReferenceWindows, Settings, TrialSpec

PATCH = "suggested.patch"


def diagnose(spec: TrialSpec, folder: Path, name: str, timeout_s: float, notes: list[str]) -> Report | None:
    """One profiled window of the configuration in `spec`, as `stepscope run` does: its report (None, with a note,
    when it failed)."""
    run = run_child(spec, folder / "trials", f"{name}-profile", timeout_s)
    if run.problem or run.result is None or not run.result.report:
        notes.append(f"the {name} diagnosis failed: {run.problem or 'no report'}")
        return None
    try:
        return from_json(Path(run.result.report).read_bytes())
    except (OSError, ValueError, msgspec.DecodeError) as exc:
        notes.append(f"the {name} diagnosis could not be read: {exc}")
        return None


def reference_windows(runs: list[Run], samples_per_s: float | None) -> ReferenceWindows | None:
    """The tuned configuration's timed windows in the runs that gave the tune's headline."""
    windows = [w for run in runs if run.child.result is not None for w in run.child.result.windows
               if w.kind == "timed"]
    if not windows:
        return None
    result = runs[0].child.result
    return ReferenceWindows(steps=[w.steps for w in windows], seconds=[w.seconds for w in windows],
                            batch_size=result.batch_size if result else None, samples_per_s=samples_per_s)


def warmup_steps(runs: list[Run]) -> int:
    """Steps before the first timed window in these runs (compilation, autotuning, set-aside windows), at most."""
    counts = []
    for run in runs:
        result = run.child.result
        if result is not None:
            first = next((i for i, w in enumerate(result.windows) if w.kind == "timed"), len(result.windows))
            counts.append(len(result.warmup_ns) + 1 + sum(w.steps for w in result.windows[:first]))
    return max(counts, default=0)


def write_patch(tune: Tune, settings: Settings, folder: Path) -> tuple[Patch | None, list[str]]:
    """The kept fixes as a diff against the user's files, at the sites the tuned configuration's runs recorded:
    the patch written (None when nothing was), and a note per fix it could not place."""
    applied, device = tune.applied, tune.device
    if not applied:
        return None, []
    where = device.name if device else "this machine"
    measured = (f"measured {tune.speedup:.2f}x together" if tune.speedup
                else "not measured together (each was measured on the rung it was tried on)")
    header = [f"stepscope tune: kept {', '.join(applied)}, {measured} on {where}"]
    for fix_id in applied:
        note = FIXES[fix_id].kept_note if fix_id in FIXES else None
        if note is not None:
            header.append(f"{fix_id}: {note(tune.applied_params.get(fix_id, {}))}")
    params = {f: tune.applied_params.get(f, {}) for f in applied}
    text, unplaced, commands = suggest(params, applied, settings, device.kind if device else "cpu", header,
                                       str(folder / PATCH))
    patch = None
    if text:
        write_atomic(folder / PATCH, text, what="patch")
        patch = Patch(name=PATCH, apply=commands, apply_in=os.getcwd())
    return patch, [f"{fix} is not in the patch (its place in the code was not found): {FIXES[fix].code}"
                   for fix in unplaced]
