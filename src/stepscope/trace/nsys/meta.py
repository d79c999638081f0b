"""An Nsight Systems export's metadata: its GPUs, process and thread names, wall-clock start, samples."""

from __future__ import annotations

import numpy as np

from stepscope.trace.model import DeviceInfo
from stepscope.trace.names import bounded_name
from stepscope.trace.nsys.db import NsysDatabase, pid_of


def devices(ex: NsysDatabase) -> list[DeviceInfo]:
    """CUDA devices from TARGET_INFO_CUDA_GPU (older exports) or TARGET_INFO_GPU (newer ones)."""
    old, new = "TARGET_INFO_CUDA_GPU", "TARGET_INFO_GPU"
    if old in ex.tables:
        table, fields = old, [ex.column(old, "deviceId", default="0"), "name",
                              ex.column(old, "globalMemorySize", default="0"),
                              ex.column(old, "numMultiprocessors", default="0"),
                              ex.column(old, "computeCapabilityMajor"),
                              ex.column(old, "computeCapabilityMinor"),
                              ex.column(old, "numThreadsPerWarp", default="0")]
    elif new in ex.tables:
        table, fields = new, [ex.column(new, "cuDevice", "id", "deviceId", default="0"), "name",
                              ex.column(new, "totalMemory", default="0"),
                              ex.column(new, "smCount", default="0"),
                              ex.column(new, "computeMajor"), ex.column(new, "computeMinor"),
                              ex.column(new, "threadsPerWarp", default="0")]
    else:
        return []
    infos: dict[int, DeviceInfo] = {}
    described = table == old or "smCount" in ex.columns(table)
    for device, name, memory, sms, major, minor, warp in ex.execute(f"SELECT {', '.join(fields)} FROM {table}"):
        major, minor = _count(major), _count(minor, zero=True)
        if not isinstance(device, int) or (described and not _count(sms) and major is None):
            continue  # a display adapter that is not a CUDA device (integrated graphics, render driver)
        infos.setdefault(device, DeviceInfo(
            id=device, name=bounded_name(str(name or "unknown device")), kind="cuda",
            compute_capability=f"{major}.{minor}" if major is not None and minor is not None else None,
            total_memory_bytes=_count(memory), sm_count=_count(sms), warp_size=_count(warp),
        ))
    return sorted(infos.values(), key=lambda d: d.id)


def _count(value: object, zero: bool = False) -> int | None:
    """A positive integer (or zero, when allowed) from the export; anything else is unknown."""
    if isinstance(value, int) and (value > 0 or (zero and value == 0)):
        return value
    return None


def thread_names(ex: NsysDatabase, pids: np.ndarray, tids: np.ndarray,
                 ) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    """Names of the processes and threads that have events."""
    threads = {(int(k) >> 24, int(k) & 0xFFFFFF) for k in np.unique((pids << 24) | tids)}
    processes = {p for p, _ in threads}
    names: dict[tuple[int, int], str] = {}
    if "ThreadNames" in ex.tables:
        rows = [(g, n) for g, n in ex.execute("SELECT globalTid, nameId FROM ThreadNames")
                if isinstance(g, int) and (pid_of(g), g & 0xFFFFFF) in threads]
        found = ex.lookup({n for _, n in rows})
        names = {(pid_of(g), g & 0xFFFFFF): bounded_name(found[n]) for g, n in rows if n in found}
    process_names: dict[int, str] = {}
    if "PROCESSES" in ex.tables and {"pid", "name"} <= ex.columns("PROCESSES"):
        process_names = {p: bounded_name(str(n)) for p, n in ex.execute("SELECT pid, name FROM PROCESSES")
                         if isinstance(p, int) and p in processes and n}
    for (pid, tid), name in names.items():
        if pid == tid:  # the main thread carries the process's name when the export lists no processes
            process_names.setdefault(pid, name)
    return process_names, names


def session_start(ex: NsysDatabase) -> int | None:
    """Wall-clock time of nsys's timestamp 0: event times count from the start of the session."""
    table = "TARGET_INFO_SESSION_START_TIME"
    if "utcEpochNs" not in ex.columns(table):
        return None
    row = ex.execute(f"SELECT utcEpochNs FROM {table}").fetchone()
    return int(row[0]) if row and isinstance(row[0], int) else None


def sampling_note(ex: NsysDatabase) -> None:
    if "COMPOSITE_EVENTS" in ex.tables:
        (count,) = ex.execute("SELECT count(*) FROM COMPOSITE_EVENTS").fetchone()
        if count:
            ex.notes.append(f"{count} CPU samples (COMPOSITE_EVENTS) are in the export, not analysed")
