"""The enumerated strings of the JSON documents (stepscope.report/1, diff/1, tune/1, meter/1), one `Literal` per
concept, and the source `Location` every section points with. msgspec checks a field typed with one of these on
decode: a report with a value outside its list is refused, never read as a value no renderer knows.

A leaf: imports nothing of ours. Each list is the values the code writes (tests/test_model_kinds.py reads the
writers: the advice rules' registry, tune's fixes, the pattern functions); a value is added, never renamed or
removed, within a schema version."""

from __future__ import annotations

from typing import Literal

import msgspec

# -- the pattern language and the fixes (DESIGN.md: the ids are a public contract; docs/patterns.md) ------------
PatternId = Literal["input_bound", "copy_bound", "sync_bound", "cpu_compute_bound", "launch_bound",
                    "communication_bound", "gpu_compute_bound", "python_overhead"]
# A fix: every id the advice rules (advice/rules RULES) recommend or weigh, and tune's own (tune/fixes, CODE_CHANGES).
FixId = Literal["dataloader_workers", "persistent_workers", "pin_memory", "non_blocking_copy", "uint8_transfer",
                "larger_batch", "set_to_none", "amp", "tf32", "torch_compile", "cuda_graphs", "remove_sync",
                "offload_cpu_work", "fused_optimizer", "overlap_communication", "cpu_threads", "channels_last",
                "cpu_bf16", "cudnn_benchmark", "resident_tensors", "copy_overlap", "half_transfer"]

# -- the trace and its device ------------------------------------------------------------------------------------
SourceFormat = Literal["kineto", "nsys", "live"]
DeviceKind = Literal["cuda", "rocm", "cpu", "other"]
Accelerator = Literal["cuda", "rocm", "other", "none"]  # what the trace's device events come from
CopyDirection = Literal["HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "other"]
TimelineRowKind = Literal["host", "runtime", "gpu", "idle"]

# -- lines and modules -------------------------------------------------------------------------------------------
SourceKind = Literal["stepscope annotations", "python stacks"]  # where a trace's user lines come from
Granularity = Literal["line", "function"]  # python stacks name a function's first line
Fitted = Literal["step meter", ""]  # "step meter": host times fitted inside the meter's phases; "": raw

# -- ranks -------------------------------------------------------------------------------------------------------
DiagnosisRole = Literal["straggler", "slowest", "median"]
MatchedBy = Literal["seq", "order", "seq and order", ""]  # "": no collective on two ranks

# -- a live capture's run section (model/run.py) -----------------------------------------------------------------
RunStatus = Literal["window recorded", "ended early", "failed", "interrupted", "terminated", "nothing recorded"]
ProfiledDevice = Literal["cuda", "cpu"]
RunPhase = Literal["training", "inference or evaluation only"]
EnergyBasis = Literal["unprofiled step time", "step time"]
# How the unprofiled reference steps were timed: the step meter, GPU slices between syncs, the host's clock, or
# tune's timed windows.
ReferenceMethod = Literal["step meter", "synchronized slices", "host clock", "stepscope tune: its timed windows"]
CostSource = Literal["calibration", "fitted"]  # how the replay's profiler cost per event was sized
FrameworkName = Literal["huggingface", "lightning", "accelerate"]

# -- the step meter (model/meter.py) -----------------------------------------------------------------------------
MeterPhaseName = Literal["data", "forward", "backward", "optimizer", "sync", "other"]
MeterBasis = Literal["before the profiler", "no profiler ran", "after the profiler (too few steps before it)"]
HookSet = Literal["C", "Python"]  # which hooks measured: capture/meter/_native.c, or the Python ones
DeviceTimer = Literal["cuda events"]

# -- tune (model/tune.py) ----------------------------------------------------------------------------------------
TuneStatus = Literal["finished", "interrupted", "failed"]
TrialArm = Literal["reference", "candidate"]
# Who timed a run's windows: the step meter, one device sync at each window's ends (CUDA), or the host's clock;
# "cuda events": what tunes before the step meter wrote for CUDA's (tests/data/gpu_h100/tune_cifar/tune.json).
Timing = Literal["step meter", "synchronised windows", "host clock", "cuda events"]
# keep | drop | undecided (measured, not kept) | failed (could not be measured) | numerics (its loss moved beyond
# tolerance) | not applied (it found nothing to change in the program); "": a tune.json from before decisions
TrialDecision = Literal["keep", "drop", "undecided", "failed", "numerics", "not applied", ""]

# One fix's settings in a trial, as tune's fixes take them: {"num_workers": 4}, {"dtype": "bfloat16"}, {"factor": 2}.
FixSettings = dict[str, int | float | str | bool]

# -- the diff (model/diff.py) ------------------------------------------------------------------------------------
ThroughputUnit = Literal["samples/s", "steps/s"]
HeadlineBasis = Literal["samples/s", "steps/s", "step time", ""]


class Location(msgspec.Struct, kw_only=True, frozen=True):
    """A line of the user's code: where a fix goes, where a sync or a DataLoader was made (`{"file", "line",
    "function", "code"}` in the JSON, as every writer spells it)."""

    # In the keys' sorted order, as report.json has always written a location (the encoding keeps field order).
    code: str = ""  # the line's text, stripped
    file: str  # as stepscope shows user code: relative to the working folder where it is under it
    function: str = ""  # its qualified name ("Trainer.step", "<module>")
    line: int

    @property
    def label(self) -> str:
        return f"{self.file}:{self.line}"
