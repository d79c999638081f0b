"""The result of `stepscope tune` (`stepscope.tune/1`): a baseline, a ladder of measured trials, what was kept.
Fields are added, never renamed or removed, within a schema version."""

from __future__ import annotations

from typing import Any

import msgspec


class Struct(msgspec.Struct, kw_only=True, omit_defaults=False):
    """Not frozen, unlike the Report's parts: tune fills its result in as the trials come back (tune/review.py)."""


TUNE_SCHEMA = "stepscope.tune/1"


class TuneDevice(Struct, kw_only=True):
    kind: str  # "cuda" | "cpu"
    name: str
    count: int = 1
    compute_capability: str | None = None
    total_memory_bytes: int | None = None
    cpu_cores: int | None = None
    torch: str | None = None


class PatternShare(Struct, kw_only=True):
    id: str
    share: float


class Measurement(Struct, kw_only=True):
    """One unprofiled run's steady state: the median step over the timed slice, and how much it varied."""

    step_time_us: float | None
    steps_per_s: float | None
    samples_per_s: float | None
    spread: float | None  # half the interquartile range of the steps, over their median
    steps: int  # steps timed
    batch_size: int | None = None
    timing: str = "host clock"  # "host clock" | "cuda events" (device-side, one sync at each end of the slice)
    wall_s: float | None = None  # the child process, start to end


class Baseline(Struct, kw_only=True):
    step_time_us: float | None  # the median over both runs' steps
    steps_per_s: float | None
    samples_per_s: float | None
    spread: float | None  # the relative standard error of that median (each run's step spread is in `runs`)
    runs: list[Measurement]  # first and last
    patterns: list[PatternShare]
    noise_band: float | None = None  # over the whole tune; each trial's own band is in its reason (docs/tune.md)
    drift: float | None = None  # |last - first| / mean of the two runs' medians
    step_source: str | None = None
    batch_size: int | None = None
    max_rel_loss_diff: float | None = None  # first run vs last: the program's own run-to-run numerics


class Numerics(Struct, kw_only=True):
    ok: bool
    max_rel_loss_diff: float | None  # over every step compared (training amplifies differences: information)
    steps_compared: int = 0
    tolerance: float | None = None  # for the first steps, step by step
    reference: int = 0  # the rung whose losses were compared (0: the baseline)
    detail: str = ""
    early_rel_diff: float | None = None  # the largest relative difference in the first steps: checked
    mean_rel_diff: float | None = None  # how far the mean loss over the steps moved: checked ...
    mean_limit: float | None = None  # ... against this (3 standard errors, at least 2%)


class Trial(Struct, kw_only=True):
    fixes: list[str]  # every fix in effect in this trial (the rung it builds on, plus `tried`)
    params: dict[str, Any]  # per fix id, the settings applied
    step_time_us: float | None
    steps_per_s: float | None
    samples_per_s: float | None
    speedup: float | None  # against the baseline (samples/s ratio when the batch changed)
    spread: float | None  # the speed-up's relative standard error (from both runs' step dispersion and counts)
    estimated_speedup: float | None  # what stepscope had estimated for `tried`, from the baseline's diagnosis
    accepted: bool
    reason: str
    numerics: Numerics | None
    compile_s: float | None  # warm-up beyond the steady step (compilation, autotuning), apart from step time
    exit_code: int | None
    rung: int = 0  # 1, 2, ... in the order tried
    tried: list[str] = msgspec.field(default_factory=list)  # the fixes this trial added
    builds_on: int = 0  # the rung it was compared with (0: the baseline)
    gain: float | None = None  # against the rung it builds on: what decided `accepted`
    status: str = "measured"  # measured | crashed | out of memory | timed out | slower | too few steps | not applied
    steps: int = 0
    batch_size: int | None = None
    wall_s: float | None = None
    log: str | None = None  # the program's output in this trial, relative to the tune folder
    # The estimate in the trial's unit: the rung it builds on, sped up by `estimated_speedup`.
    estimated_samples_per_s: float | None = None
    estimated_steps_per_s: float | None = None


class NotTried(Struct, kw_only=True):
    id: str
    reason: str
    suggestion: str = ""  # the code change, for fixes that cannot be applied from outside
    estimated_speedup: float | None = None


class Tune(Struct, kw_only=True):
    schema: str = TUNE_SCHEMA
    generator: str = ""
    command: list[str]
    device: TuneDevice | None
    baseline: Baseline | None
    trials: list[Trial]
    applied: list[str]
    speedup: float | None  # measured: baseline median step / tuned median step (samples/s ratio if the batch changed)
    final_patterns: list[PatternShare]
    patch: str | None  # file name in the tune folder
    not_tried: list[NotTried]
    status: str = "finished"  # finished | interrupted | failed
    applied_params: dict[str, Any] = msgspec.field(default_factory=dict)
    seed: int = 0
    budget_s: float | None = None
    elapsed_s: float | None = None
    folder: str | None = None
    baseline_report: str | None = None  # the profiled baseline's report.json, relative to the folder
    final_report: str | None = None  # the tuned configuration's
    notes: list[str] = msgspec.field(default_factory=list)
    patch_apply: list[str] = msgspec.field(default_factory=list)  # commands, each applying the patch alone
    patch_apply_in: str | None = None  # the folder they run in: the one the tune ran in


def tune_to_json(tune: Tune) -> bytes:
    return msgspec.json.format(msgspec.json.encode(tune, order="deterministic"), indent=2)


def tune_from_json(data: bytes | str) -> Tune:
    """Decode a stepscope.tune/1 document; raises msgspec errors on anything else."""
    tune = msgspec.json.decode(data, type=Tune)
    if tune.schema != TUNE_SCHEMA:
        raise ValueError(f"unsupported schema {tune.schema!r} (expected {TUNE_SCHEMA})")
    return tune
