"""The step meter's file, `meter.json` (`stepscope.meter/1`): every step of the program measured unprofiled, its
phases, the spans the profiler ran in, and the DataLoader workers' batches. capture writes it from inside the
user's program, so this module imports nothing of ours but the leaf `runfile` (a leaf, like `runfolder` and
`telemetry`).

Phases are the main thread's exclusive time: waiting for the DataLoader (`data`), the model's top-level forward,
the backward pass, the optimizer step, blocked in a device sync (`sync`); `other` is the rest of the wall time, so
a step's phases add up to its wall time exactly. On a GPU, `device_ns` is the device's time for the step (CUDA
events at the step boundaries, read a step later with no sync): -1 where it is not known."""

from __future__ import annotations

import msgspec

from stepscope.model.kinds import DeviceTimer, HookSet, MeterBasis, MeterPhaseName
from stepscope.model.runfile import negative

METER_SCHEMA = "stepscope.meter/1"
PHASES = ("data", "forward", "backward", "optimizer", "sync")  # `other` = wall - their sum
DEVICE_PHASES = ("forward", "backward", "optimizer")  # marked on the device; `other` = device_ns - their sum


class Struct(msgspec.Struct, kw_only=True, omit_defaults=False):
    pass


class MeterSteps(Struct, kw_only=True):
    """One entry per step, in the program's order; `first_step` is the index of the first entry (a long run's live
    file keeps only its latest steps)."""

    first_step: int = 0
    end_ns: list[int] = msgspec.field(default_factory=list)  # host clock (perf_counter_ns) at the step's end
    wall_ns: list[int] = msgspec.field(default_factory=list)
    data_ns: list[int] = msgspec.field(default_factory=list)
    forward_ns: list[int] = msgspec.field(default_factory=list)
    backward_ns: list[int] = msgspec.field(default_factory=list)
    optimizer_ns: list[int] = msgspec.field(default_factory=list)
    sync_ns: list[int] = msgspec.field(default_factory=list)
    device_ns: list[int] = msgspec.field(default_factory=list)  # empty without a device timer
    # The device's time in each of DEVICE_PHASES (from the host's entry into the phase to its next mark: the work
    # enqueued in it); the rest of device_ns is `other`. Empty without a device timer, -1 where not known.
    device_forward_ns: list[int] = msgspec.field(default_factory=list)
    device_backward_ns: list[int] = msgspec.field(default_factory=list)
    device_optimizer_ns: list[int] = msgspec.field(default_factory=list)


class WorkerBatches(Struct, kw_only=True):
    """The DataLoader workers' side: each batch a worker made, when it began and when it was ready (host clock)."""

    workers: int  # worker processes seen
    worker_id: list[int] = msgspec.field(default_factory=list)
    start_ns: list[int] = msgspec.field(default_factory=list)
    ready_ns: list[int] = msgspec.field(default_factory=list)
    cpu_ns: list[int] = msgspec.field(default_factory=list)  # the worker thread's CPU time on the batch


class MeterRecord(Struct, kw_only=True):
    schema: str = METER_SCHEMA
    source: str | None  # the step source the steps are counted by
    batch_size: int | None = None
    done: bool = False  # the program has ended (a live file says False)
    steps: MeterSteps = msgspec.field(default_factory=MeterSteps)
    # [start, end] host-clock spans in which a profiler ran (the window's passes, the calibration)
    profiled_spans: list[list[int]] = msgspec.field(default_factory=list)
    profiled: list[int] | None = None  # [first, last] step index the profiler touched, None: never ran
    overflow_steps: int = 0  # steps beyond the per-step cap, counted in the totals only
    overflow_totals_ns: dict[str, int] = msgspec.field(default_factory=dict)
    workers: WorkerBatches | None = None
    device_timer: DeviceTimer | None = None  # "cuda events" when the device's step time was measured
    device_busy: list[list[float]] = msgspec.field(default_factory=list)  # [host ns, NVML busy %], once a second
    # [host ns, this process's CPU seconds, the machine's busy CPU seconds]: once a second and around the profiler's
    # window (the other processes' load before and after it); empty where /proc/stat is not there
    host_cpu: list[list[float]] = msgspec.field(default_factory=list)
    num_workers: int | None = None  # the main DataLoader's workers, when known
    cpu_cores: int | None = None  # CPUs (hyperthreads counted) the process may use: what workers share
    hooks: HookSet | None = None  # which set measured; None: not installed
    notes: list[str] = msgspec.field(default_factory=list)


def meter_to_json(record: MeterRecord) -> bytes:
    return msgspec.json.encode(record)


def meter_from_json(data: bytes) -> MeterRecord:
    record = msgspec.json.decode(data, type=MeterRecord)
    if problem := meter_problem(record):
        raise ValueError(problem)
    return record


HOST_PHASES = ("wall_ns", "data_ns", "forward_ns", "backward_ns", "optimizer_ns", "sync_ns")
DEVICE_ARRAYS = ("device_ns", "device_forward_ns", "device_backward_ns", "device_optimizer_ns")


def meter_problem(record: MeterRecord, max_ns: int = 10**15) -> str | None:
    """Why the record cannot be what a meter measured (its arrays one per step, every number a count or a time),
    None when it can be; `max_ns` bounds a step's time and its phases'."""
    if record.schema != METER_SCHEMA:
        return f"not a {METER_SCHEMA} file (schema {record.schema!r})"
    steps = record.steps
    unknown_allowed = {name: [] for name in DEVICE_ARRAYS}  # -1: the device's time not known for that step
    if (where := negative(msgspec.structs.replace(record, steps=msgspec.structs.replace(steps, **unknown_allowed)))):
        return f"a negative number at {where}"
    if any(v < -1 for name in DEVICE_ARRAYS for v in getattr(steps, name)):
        return "a device time under -1 (-1: not known)"
    n = len(steps.end_ns)
    for name in HOST_PHASES + DEVICE_ARRAYS:
        values = getattr(steps, name)
        if len(values) != n and not (name in (*DEVICE_ARRAYS, "sync_ns") and not values):
            return f"steps.{name} has {len(values)} entries, steps.end_ns {n}: one per step"
        if any(v > max_ns for v in values):
            return f"steps.{name} holds a time over {max_ns / 8.64e13:.0f} days"
    if record.profiled is not None and (len(record.profiled) != 2 or record.profiled[0] > record.profiled[1]):
        return f"profiled is {record.profiled[:4]}: [first step, last step]"
    rows = (("profiled_spans", record.profiled_spans, 2), ("device_busy", record.device_busy, 2),
            ("host_cpu", record.host_cpu, 3))
    for name, table, width in rows:
        if any(len(row) != width for row in table):
            return f"{name} rows must hold {width} numbers each"
    w = record.workers
    if w is not None and len({len(w.worker_id), len(w.start_ns), len(w.ready_ns), len(w.cpu_ns)}) > 1:
        return "workers' arrays differ in length: one entry per batch"
    return None


# -- the report's `meter` section (stepscope.report/1): what the meter says of the job ---------------------------

class Frozen(msgspec.Struct, kw_only=True, omit_defaults=False, frozen=True):
    pass


class MeterPhase(Frozen, kw_only=True):
    name: MeterPhaseName
    mean_us: float  # per step, over the headline's steps; the phases add up to the headline step
    share: float


class MeterWorkers(Frozen, kw_only=True):
    """The DataLoader workers over the headline's steps."""

    workers: int  # worker processes seen
    batches: int
    batch_us: float  # a worker's wall time per batch (mean)
    batch_cpu_us: float | None  # of it, on a CPU (the rest waits: storage, sleeps, locks)
    busy_share: float  # the workers' wall time / (workers x the steps' span)


class Meter(Frozen, kw_only=True):
    """The job measured unprofiled, step by step (capture/meter): the report's headline stands on it."""

    source: str | None  # the step source the steps are counted by
    steps_measured: int  # every step the meter saw
    basis: MeterBasis  # which steps the headline is
    steps: int  # how many
    step_us: float  # their mean wall time: the headline
    median_us: float
    p10_us: float
    p90_us: float
    phases: list[MeterPhase]  # add up to step_us
    first_step_us: float | None = None  # the program's first step (start-up), never in the headline
    device_step_us: float | None = None  # the device's time per step (CUDA events), over the same steps
    device_phases: list[MeterPhase] | None = None  # forward, backward, optimizer, other on the device: add up to it
    device_busy: float | None = None  # NVML's share of time a kernel ran, over the readings in these steps' span
    after_step_us: float | None = None  # mean step after the profiler stopped
    after_steps: int = 0
    changed_after: float | None = None  # after / before - 1 when beyond the steps' noise: the process changed
    # The cores other processes kept busy while the headline's steps ran, and from the profiler's start to the end:
    # a change in the machine's load, not the profiler, can be why the process ran differently after it.
    others_cores_before: float | None = None
    others_cores_after: float | None = None
    # The headline's first half of steps over its second half - 1, when beyond the steps' noise: still warming up
    # (allocator, caches), so the headline runs high; more steps before the window (--skip) give a steadier one.
    warming: float | None = None
    warming_left_out: int = 0  # steps before the headline's, still getting faster (warm-up), left out of it
    # One-off stalls among the headline's steps (over 3x their median, at most one in eight: the first full garbage
    # collection after the imports, a lazy initialisation), left out of it: each one's time.
    stalls_us: list[float] | None = None
    workers: MeterWorkers | None = None
    num_workers: int | None = None  # the main DataLoader's num_workers
    cpu_cores: int | None = None
    samples_per_s: float | None = None
    # This process's CPU time per step, all threads (host_cpu's readings over the headline's span): with no workers,
    # the fetch's CPU time is at most this, so a loader that mostly waits (storage, a network) is told from one that
    # computes. None where the readings are too few (under half a second).
    process_cpu_us: float | None = None
    # The data waits over RESTART_RATIO (advice/rules/dataloader.py) times their median, less that median, among the
    # headline's steps and the stalls between them: DataLoader workers started again (a new epoch's iterator).
    restart_waits_us: list[float] | None = None

    def phase_us(self, name: str) -> float:
        """A phase's mean per step (µs); 0 for a phase the meter has no figure of."""
        return next((p.mean_us for p in self.phases if p.name == name), 0.0)

    def phase_share(self, name: str) -> float:
        return next((p.share for p in self.phases if p.name == name), 0.0)
