"""The result of `stepscope tune` (`stepscope.tune/1`): a baseline, a ladder of measured trials, what was kept.
Fields are added, never renamed or removed, within a schema version."""

from __future__ import annotations

import msgspec

from stepscope.model.kinds import (
    DeviceKind,
    FixId,
    FixSettings,
    PatternId,
    Timing,
    TrialArm,
    TrialDecision,
    TuneStatus,
)


class Struct(msgspec.Struct, kw_only=True, omit_defaults=False):
    """Not frozen, unlike the Report's parts (a Tune is built whole by tune/review.tune_result each time it changes)."""


TUNE_SCHEMA = "stepscope.tune/1"


class TuneDevice(Struct, kw_only=True):
    kind: DeviceKind
    name: str
    count: int = 1
    compute_capability: str | None = None
    total_memory_bytes: int | None = None
    cpu_cores: int | None = None
    torch: str | None = None


class PatternShare(Struct, kw_only=True):
    id: PatternId
    share: float


class WindowStat(Struct, kw_only=True):
    """One window of consecutive steps: what it delivered over its wall time (device synchronised at its ends)."""

    samples: float  # samples, or steps when the batch size is unknown
    seconds: float
    steps: int = 0


class Measurement(Struct, kw_only=True):
    """One unprofiled run's steady state: throughput over its timed windows, and how much they varied."""

    step_time_us: float | None  # wall time per step over the windows
    steps_per_s: float | None
    samples_per_s: float | None
    spread: float | None  # half the range of the windows' throughputs, over the run's throughput
    steps: int  # steps timed
    batch_size: int | None = None
    # "step meter" (the meter timed every window); the clock's own where the meter could not stand for it
    timing: Timing = "host clock"
    wall_s: float | None = None  # the child process, start to end
    windows: list[WindowStat] = msgspec.field(default_factory=list)  # the timed windows
    warmup_s: float | None = None  # from the first step to the first timed window (compilation included)
    compile_s: float | None = None  # in torch's compile callbacks
    log: str | None = None  # the program's output, relative to the tune folder


class TrialRun(Struct, kw_only=True):
    """One run of a comparison: of the candidate, or of the rung it is compared with, in the order they ran."""

    arm: TrialArm
    rate: float | None  # samples/s (steps/s when the batch size is unknown) over its windows
    windows: list[WindowStat] = msgspec.field(default_factory=list)
    wall_s: float | None = None
    compile_s: float | None = None
    log: str | None = None


class Baseline(Struct, kw_only=True):
    step_time_us: float | None  # the median over both runs' steps
    steps_per_s: float | None
    samples_per_s: float | None
    spread: float | None  # the relative standard error of that median (each run's step spread is in `runs`)
    runs: list[Measurement]  # first and last
    patterns: list[PatternShare]
    noise_band: float | None = None  # tunes before interleaved runs: the band gains had to clear; now null
    drift: float | None = None  # |last - first| / mean of the first and last baseline runs' throughputs
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
    fixes: list[FixId]  # every fix in effect in this trial (the rung it builds on, plus `tried`)
    params: dict[FixId, FixSettings]  # per fix, the settings applied
    step_time_us: float | None
    steps_per_s: float | None
    samples_per_s: float | None
    speedup: float | None  # against the baseline: the gains of the rungs it builds on, times its own
    spread: float | None  # the gain's relative standard error (from its bootstrap interval)
    estimated_speedup: float | None  # what stepscope had estimated for `tried`, from the baseline's diagnosis
    accepted: bool
    reason: str
    numerics: Numerics | None
    compile_s: float | None  # warm-up beyond the steady step (compilation, autotuning), apart from step time
    exit_code: int | None
    rung: int = 0  # 1, 2, ... in the order tried
    tried: list[FixId] = msgspec.field(default_factory=list)  # the fixes this trial added
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
    interval: list[float] | None = None  # the gain's confidence interval [low, high] (bootstrap over windows)
    confidence: float | None = None  # of that interval (0.95)
    windows: int = 0  # the candidate's timed windows the gain is measured on
    runs: list[TrialRun] = msgspec.field(default_factory=list)  # the comparison's runs, in the order they ran
    decision: TrialDecision = ""  # keep, or why not; "" in a tune.json written before trials carried it
    warmup_s: float | None = None  # the candidate's warm-up (to its first timed window), compilation included
    # The two sides of `gain`, in the ladder's unit (samples/s; steps/s when the batch size is unknown): the
    # candidate's throughput in the comparison and the rung it builds on at the same times (interpolated between
    # the alternating runs around each candidate run); geometric means over the candidate's runs, so
    # paired_rate / paired_reference_rate == gain. `samples_per_s` is the candidate's runs pooled, a figure apart.
    paired_rate: float | None = None
    paired_reference_rate: float | None = None


class NotTried(Struct, kw_only=True):
    id: FixId
    reason: str
    suggestion: str = ""  # the code change, for fixes that cannot be applied from outside
    estimated_speedup: float | None = None


class FinalRecommendation(Struct, kw_only=True):
    """What the diagnosis of the tuned configuration still recommends, less what the ladder applied or measured."""

    id: FixId
    title: str
    estimated_speedup: float | None = None


class Tune(Struct, kw_only=True):
    schema: str = TUNE_SCHEMA
    generator: str = ""
    command: list[str]
    device: TuneDevice | None
    baseline: Baseline | None
    trials: list[Trial]
    applied: list[FixId]
    speedup: float | None  # measured: the tuned configuration over the baseline, interleaved (throughput ratio)
    final_patterns: list[PatternShare]
    patch: str | None  # file name in the tune folder
    not_tried: list[NotTried]
    status: TuneStatus = "finished"
    applied_params: dict[FixId, FixSettings] = msgspec.field(default_factory=dict)  # per fix kept, its settings
    seed: int = 0
    budget_s: float | None = None
    elapsed_s: float | None = None
    folder: str | None = None
    baseline_report: str | None = None  # the profiled baseline's report.json, relative to the folder
    final_report: str | None = None  # the tuned configuration's
    notes: list[str] = msgspec.field(default_factory=list)
    patch_apply: list[str] = msgspec.field(default_factory=list)  # commands, each applying the patch alone
    patch_apply_in: str | None = None  # the folder they run in: the one the tune ran in
    speedup_interval: list[float] | None = None  # the tuned configuration against the baseline, interleaved
    speedup_windows: int = 0
    final_runs: list[TrialRun] = msgspec.field(default_factory=list)  # that comparison's runs
    final_samples_per_s: float | None = None  # the tuned configuration's throughput in it
    final_steps_per_s: float | None = None
    # The two sides of `speedup`, as a Trial's paired rates: the tuned configuration and the baseline at its times.
    final_paired_rate: float | None = None
    final_paired_baseline_rate: float | None = None
    min_gain: float | None = None  # the smallest gain worth a change (a fix's interval must clear 1 + it)
    final_recommendations: list[FinalRecommendation] = msgspec.field(default_factory=list)


def tune_to_json(tune: Tune) -> bytes:
    return msgspec.json.format(msgspec.json.encode(tune, order="deterministic"), indent=2)


def tune_from_json(data: bytes | str) -> Tune:
    """Decode a stepscope.tune/1 document; raises msgspec errors on anything else."""
    tune = msgspec.json.decode(data, type=Tune)
    if tune.schema != TUNE_SCHEMA:
        raise ValueError(f"unsupported schema {tune.schema!r} (expected {TUNE_SCHEMA})")
    return tune
