"""The profiler's cost in a trace recorded elsewhere (no calibration, no unprofiled steps): the one place that decides
it. Advice's device-side what-ifs (advice/whatif.without_profiler) and predict (the origin's step and every
target's, predict/section.py) take out what this module says; nothing else decides a recorded trace's profiler cost.

The cost per event is `host_clock.RECORDED_DEFAULT` (what 13 calibrations measured with shapes, memory and stacks
off) plus what the settings the trace was recorded with add. The settings are read from the profiler's own metadata
where the trace has it (torch.profiler writes "record_shapes": "1" and so on, since torch 1.11: trace/kineto/meta.py),
else inferred from the events: input shapes on the ops (record_shapes), allocator events (profile_memory), Python
function events or a "Call stack" string on the ops (with_stack).

What shapes and a stack add falls inside each op (both are taken just after its start timestamp), so the trace
measures it itself: on each host thread, the median duration of its leaf metadata-only ops (a view does no work: a
few hundred ns plain) minus that plain duration is what every op on that thread paid more. A thread with too few of
them takes the documented default per setting instead (docs/patterns.md). Allocations happen inside ops that do
work, so they take their default.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.replay.host_clock import RECORDED_DEFAULT, HostCost, step_threads
from stepscope.trace.model import Kind, Trace

# Leaf ops that do no work (metadata only): their recorded length beyond the plain one is the profiler's.
METADATA_OPS = frozenset({"aten::view", "aten::as_strided", "aten::_reshape_alias", "aten::alias", "aten::resize_"})
# Their plain length: the median aten::view on the HTA V100 ResNet trace (v100_resnet_ns_units, recorded with
# shapes, memory and stacks off) is 0.39 µs on the main thread, aten::as_strided 0.14-0.39 µs.
PLAIN_LEAF_NS = 400.0
MIN_LEAF_OPS = 30  # a thread with fewer leaf metadata ops takes the defaults per setting
# Defaults per setting, ns, where the trace cannot measure it (docs/patterns.md gives each its reason):
# record_shapes per op: the tutorial V100 trace's autograd-thread leaf ops (shapes and memory on, no Python stack
# there) are 1-4 µs long (resize_ 1 µs median) against 0.4 µs plain.
SHAPES_OP_NS = 1000.0
# with_stack before the Python tracer (a "Call stack" string per op, torch < 1.11): the stack was snapshotted and
# formatted at each op ("prohibitively expensive", pytorch/kineto#630); the tutorial trace's main-thread leaf ops
# are 17-19 µs long against 1-4 µs on its autograd thread, which has no Python stack.
STACK_OP_NS = 15000.0
# with_stack with the Python tracer (python_function events): one two-word record per call and return
# (pytorch/pytorch#67407); taken as half an op's callbacks per event.
PYTHON_EVENT_NS = RECORDED_DEFAULT.op_ns / 2
# profile_memory per allocator event: one record, as an op's start is; half an op's callbacks. No calibration of it
# exists in the project (all were taken with memory off).
ALLOC_NS = RECORDED_DEFAULT.op_ns / 2
# A device-side fix whose two readings (the default alone, and with the settings' cost) differ by more than this is
# said on both (the host/device balance depends on what the profiler cost).
BOTH_READINGS_APART = 0.05


@dataclass(frozen=True)
class Settings:
    """The profiler settings a recorded trace shows, each with how it was found."""

    record_shapes: str | None = None  # "metadata" | "events" | None (off, or nothing shows it)
    profile_memory: str | None = None
    with_stack: str | None = None  # "metadata" | "call stacks" | "python events" | None

    def on(self) -> list[str]:
        return [f"{name} ({how})" for name, how in (("record_shapes", self.record_shapes),
                                                     ("profile_memory", self.profile_memory),
                                                     ("with_stack", self.with_stack)) if how]


@dataclass(frozen=True)
class RecordedCost:
    """The cost per event taken out of a recorded trace, and the reading without its settings' share."""

    cost: HostCost  # the default and the settings' cost
    default: HostCost  # the default alone: the other reading where the settings' cost decides
    settings: Settings
    measured_threads: int  # threads whose extra per op the trace measured (the rest take the defaults)
    text: str  # the assumption, as an estimate says it

    @property
    def has_settings(self) -> bool:
        return self.cost != self.default


def settings_of(trace: Trace) -> Settings:
    """The profiler settings: from its metadata where the trace has it, else from the events."""
    meta, ev = trace.meta, trace.events
    named = set(meta.profiler_settings)
    ops = ev.kind == Kind.CPU_OP
    shapes = "metadata" if "record_shapes" in named else "events" if (ops & (ev.inputs >= 0)).any() else None
    memory = "metadata" if "profile_memory" in named else "events" if len(trace.memory) else None
    call_stacks = meta.call_stack_ops > 0 or bool((ops & (ev.stack >= 0)).any())
    stack = ("metadata" if "with_stack" in named else "call stacks" if call_stacks
             else "python events" if (ev.kind == Kind.PYTHON).any() else None)
    return Settings(shapes, memory, stack)


def recorded_cost(trace: Trace) -> RecordedCost:
    """The one decision of the profiler's cost per event for a trace recorded without a calibration."""
    return trace.derived("replay.recorded_cost", lambda: _recorded_cost(trace))


def _recorded_cost(trace: Trace) -> RecordedCost:
    settings = settings_of(trace)
    base = RECORDED_DEFAULT
    said = f"{base.op_ns:.0f} ns an op, {base.launch_ns:.0f} ns a runtime call, {base.range_ns:.0f} ns a range"
    if not (settings.record_shapes or settings.with_stack or settings.profile_memory):
        return RecordedCost(base, base, settings, 0, "the profiler's host cost taken out at its default per event, "
                                                     f"the trace having no calibration ({said})")
    per_op = (SHAPES_OP_NS if settings.record_shapes else 0.0) + (
        STACK_OP_NS if settings.with_stack in ("metadata", "call stacks") else 0.0)
    extra, measured = [], 0
    for pid, tid in sorted(step_threads(trace)):
        ns = _leaf_excess(trace, pid, tid) if settings.record_shapes or settings.with_stack else None
        measured += ns is not None
        extra.append((pid, tid, ns if ns is not None else per_op))
    cost = HostCost(op_ns=base.op_ns, launch_ns=base.launch_ns, range_ns=base.range_ns,
                    alloc_ns=ALLOC_NS if settings.profile_memory else 0.0,
                    python_ns=PYTHON_EVENT_NS if settings.with_stack == "python events" else 0.0,
                    op_extra_ns=tuple(e for e in extra if e[2] > 0))
    more = ", ".join(f"{ns / 1e3:.1f} µs more an op on thread {tid}" for _, tid, ns in cost.op_extra_ns)
    how = (f"measured in the trace from its leaf metadata ops on {measured} thread(s)" if measured
           else "the defaults per setting")
    text = (f"the profiler's host cost taken out per event for the settings the trace was recorded with "
            f"({', '.join(settings.on())}): its default ({said})"
            + (f", {cost.alloc_ns:.0f} ns an allocation" if cost.alloc_ns else "")
            + (f", {cost.python_ns:.0f} ns a Python event" if cost.python_ns else "")
            + (f", {more} ({how})" if more else ""))
    return RecordedCost(cost, base, settings, measured, text)


def _leaf_excess(trace: Trace, pid: int, tid: int) -> float | None:
    """What each op on the thread paid beyond the default: its leaf metadata ops' median length over the plain one;
    None where the thread has fewer than MIN_LEAF_OPS of them."""
    ev = trace.events
    rows = np.flatnonzero((ev.kind == Kind.CPU_OP) & (ev.pid == pid) & (ev.tid == tid))
    if len(rows) < MIN_LEAF_OPS:
        return None
    rows = rows[np.argsort(ev.start[rows], kind="stable")]
    nxt = np.concatenate([ev.start[rows][1:], [np.iinfo(np.int64).max]])
    leaf = nxt >= ev.end[rows]
    names = trace.names_where(lambda s: s in METADATA_OPS)
    picked = rows[leaf & names[rows]]
    if len(picked) < MIN_LEAF_OPS:
        return None
    return max(float(np.median(ev.dur[picked])) - PLAIN_LEAF_NS, 0.0)
