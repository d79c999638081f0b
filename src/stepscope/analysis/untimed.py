"""Host ops the trace gives no duration: a trace whose CPU ops mostly last 0 ns (a mangled file, a converter that
dropped `dur`) has no host time in its ops, so what the host did shows only as gaps ("no op: Python or untraced"),
and the CPU patterns would stand on them without a word. The report says so."""

from __future__ import annotations

from stepscope.trace.model import Kind, Trace

MOST = 0.5  # over half the CPU ops untimed: the host's breakdown cannot be read from them
MIN_OPS = 20  # a handful of instant ops (markers) is normal


def untimed_ops_note(trace: Trace) -> str | None:
    ev = trace.events
    ops = ev.kind == Kind.CPU_OP
    count = int(ops.sum())
    zero = int((ops & (ev.dur <= 0)).sum())
    if count < MIN_OPS or zero <= MOST * count:
        return None
    return (f"{zero:,} of the trace's {count:,} CPU ops have no duration (0 ns): the host's time is not in its ops, "
            "so the host-side figures (cpu_exec, the CPU patterns, time by line) stand on the gaps between them, "
            "not on what ran")
