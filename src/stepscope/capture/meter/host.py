"""The machine's CPU time so far, and this process's: how busy the other processes kept the cores.

A process that runs much faster after the profiler than before it may have been changed by the profiler (its large
allocations raise glibc's mmap threshold) or may have shared the cores with another job that then ended: torch's
intra-op threads spin at every barrier, so one busy core elsewhere can slow a two-thread step many times over (the
demo measured 2.5 s per step beside a busy process, 49 ms alone). Readings taken around the profiler's window tell
the two apart (pipeline/meter.py). Each reading is a file read and a system call: taken about once a second and
around the window, never per step."""

from __future__ import annotations

import os
import time

# USER_HZ: the unit of /proc/stat's counters (100 on every Linux the kernel's ABI allows).
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def read() -> list[float] | None:
    """[host clock ns, this process's CPU seconds, the machine's busy CPU seconds], None where /proc/stat is not
    there (not Linux)."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return None
    try:
        ticks = [int(x) for x in fields]
    except ValueError:
        return None
    if len(ticks) < 5:
        return None
    idle = ticks[3] + ticks[4]  # idle + iowait
    busy = (sum(ticks[:8]) - idle) / TICKS  # user nice system idle iowait irq softirq steal; guests are in user
    own = os.times()
    return [float(time.perf_counter_ns()), own.user + own.system, busy]

