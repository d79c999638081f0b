"""The diff of two runs (`stepscope.diff/1`): the typed result of `stepscope.compare.compare`.
Fields are added, never renamed or removed, within a schema version."""

from __future__ import annotations

import msgspec

from stepscope.model.kinds import HeadlineBasis, PatternId, SourceFormat, ThroughputUnit
from stepscope.model.noise import DiffVerdict
from stepscope.model.report import Struct

DIFF_SCHEMA = "stepscope.diff/1"


class DiffSide(Struct, kw_only=True):
    paths: list[str]
    format: SourceFormat
    device: str | None
    step_count: int
    step_time_us: float | None
    steps_per_s: float | None
    samples_per_s: float | None
    gpu_utilization: float | None
    primary_pattern: PatternId | None
    mfu: float | None = None
    model_flops_per_step: float | None = None
    peak_allocated_bytes: int | None = None  # the largest over the devices
    peak_reserved_bytes: int | None = None
    batch_size: int | None = None  # samples per step: the run's, else samples/s over steps/s (--batch-size)
    config: dict[str, str] = msgspec.field(default_factory=dict)  # what the run had set, in words (Diff.config_changes)


class CategoryDelta(Struct, kw_only=True):
    category: str
    before_us: float
    after_us: float
    delta_us: float
    # Per sample, when both runs know their batch size (the figures to compare when it changed).
    before_us_per_sample: float | None = None
    after_us_per_sample: float | None = None
    delta_us_per_sample: float | None = None


class PatternChange(Struct, kw_only=True):
    id: PatternId
    before_share: float | None  # None: not found in that run
    after_share: float | None


class KernelChange(Struct, kw_only=True):
    name: str
    before_us_per_step: float | None  # None: not among that run's kernels
    after_us_per_step: float | None
    delta_us_per_step: float


class LineChange(Struct, kw_only=True):
    file: str
    line: int
    function: str
    code: str = ""
    before_us: float | None  # per step
    after_us: float | None
    delta_us: float
    before_us_per_sample: float | None = None
    after_us_per_sample: float | None = None
    delta_us_per_sample: float | None = None


class ConfigChange(Struct, kw_only=True):
    """A setting that differs between the runs, in words: batch size, DataLoader workers, dtype, compile, device."""

    name: str
    before: str | None  # None: not known for that run
    after: str | None


class KernelGroup(Struct, kw_only=True):
    """Kernels that differ only in their C++ template arguments or parameters, summed: time per step and per sample."""

    name: str  # the shared name, template arguments and parameters elided ('at::native::elementwise_kernel<…>(…)')
    kernels: int  # distinct kernel names in the group, over both runs
    before_us_per_step: float | None  # None: none of the group in that run's kernel list
    after_us_per_step: float | None
    delta_us_per_step: float
    before_us_per_sample: float | None = None
    after_us_per_sample: float | None = None
    delta_us_per_sample: float | None = None


class Diff(Struct, kw_only=True):
    schema: str = DIFF_SCHEMA
    generator: str = ""
    before: DiffSide
    after: DiffSide
    step_time_ratio: float | None  # after / before: under 1 is faster
    speedup: float | None  # before / after
    throughput_ratio: float | None  # after / before, in throughput_unit
    throughput_unit: ThroughputUnit  # samples/s when both runs know their batch size
    breakdown: list[CategoryDelta]
    patterns_appeared: list[PatternChange]
    patterns_gone: list[PatternChange]
    patterns_kept: list[PatternChange]
    kernels_appeared: list[KernelChange]
    kernels_disappeared: list[KernelChange]
    kernels_changed: list[KernelChange]  # in both runs, the largest changes of time per step first
    kernel_lists_complete: bool  # False: a run lists only its top kernels, so appeared/gone means in that list
    lines_changed: list[LineChange] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)
    config_changes: list[ConfigChange] = msgspec.field(default_factory=list)
    per_sample: bool = False  # the batch size changed: compare time per sample (breakdown, kernels, lines, the gate)
    # The one speed-up the diff leads with: the throughput ratio when both runs have one (samples/s when both know
    # their batch), else the step-time speed-up; its basis in words.
    headline_speedup: float | None = None
    headline_basis: HeadlineBasis = ""
    kernel_groups: list[KernelGroup] = msgspec.field(default_factory=list)  # largest change first (per sample if so)
    # The step meter's phases before and after (data, forward, backward, optimizer, sync, other), when both runs were
    # measured unprofiled: the figures that add up to each run's headline step.
    phases: list[CategoryDelta] = msgspec.field(default_factory=list)
    # Why the two step times are not on one basis (one measured without the profiler, one as a profiler recorded it),
    # "" when they are; then no speed-up is given (ratios and the headline are None).
    mismatch: str = ""
    # The headline judged against both runs' noise (summary.noise, stats.verdict): "within_noise" when the change is
    # one the runs' own step-to-step variation can make, "inconclusive" when a run has too few steps to say.
    verdict: DiffVerdict = "inconclusive"
    noise: float | None = None  # the relative noise of the headline ratio: both runs' combined (stats.combined)
    noise_basis: str = ""  # each run's, "meter steps / recorded steps"; "" when unknown


def diff_to_json(diff: Diff) -> bytes:
    return msgspec.json.format(msgspec.json.encode(diff, order="deterministic"), indent=2)
