"""What a trace's own timing makes unreliable, said in the report's notes rather than read as a finding:
- host ops the trace gives no duration: CPU ops that mostly last 0 ns (a mangled file, a converter that dropped
  `dur`) put no host time in the ops, so what the host did shows only as gaps ("no op: Python or untraced"), and the
  CPU patterns would stand on them without a word;
- kernels that start seconds after their launch calls: the device's clock is off the host's (or the kernels were
  moved), so each step is stretched to hold its kernels and no pattern can be read from the result."""

from __future__ import annotations

import numpy as np

from stepscope.trace.model import Kind, Trace

MOST = 0.5  # over half the CPU ops untimed: the host's breakdown cannot be read from them
MIN_OPS = 20  # a handful of instant ops (markers) is normal
# A launch whose kernel starts over this long after it (median): no queue holds work that long (seen: 10 s, a
# step 53x its length); GPU queues of a busy step are milliseconds deep.
MAX_LAUNCH_DELAY_NS = 1_000_000_000


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


def late_kernels_note(launch_delay_ns: np.ndarray) -> str | None:
    """`launch_delay_ns`: each linked kernel's start minus its launch call's (analysis/kernels)."""
    if len(launch_delay_ns) < MIN_OPS:
        return None
    delay = float(np.median(launch_delay_ns))
    if delay <= MAX_LAUNCH_DELAY_NS:
        return None
    return (f"kernels start a median {delay / 1e9:.3g} s after their launch calls: the device's clock is off the "
            "host's (or the kernels were moved), so each step is stretched to hold its kernels; the step times, GPU "
            "utilisation and patterns of this trace are not to be trusted")
