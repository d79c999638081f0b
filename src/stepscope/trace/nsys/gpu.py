"""The GPU activity tables of an Nsight Systems export: kernels, copies, memsets and synchronisations."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from stepscope.trace.model import CopyKind, HostMemory, Kind
from stepscope.trace.nsys.db import INVALID_ID, KERNEL, MEMCPY, MEMSET, SYNC, Block, NsysDatabase, absent_if

# Enum values for exports without ENUM_* tables (nsys docs, "CUDA copyKind/memoryKind enum").
MEMCPY_KIND_FALLBACK = {
    0: "UNKNOWN", 1: "HTOD", 2: "DTOH", 3: "HTOA", 4: "ATOH", 5: "ATOA", 6: "ATOD", 7: "DTOA",
    8: "DTOD", 9: "HTOH", 10: "PTOP", 11: "UVM_HTOD", 12: "UVM_DTOH", 13: "UVM_DTOD",
}
MEMORY_KIND_FALLBACK = {
    0: "PAGEABLE", 1: "PINNED", 2: "DEVICE", 3: "ARRAY", 4: "MANAGED", 5: "DEVICE_STATIC",
    6: "MANAGED_STATIC", 7: "UNKNOWN",
}
# Symbol -> (the direction as Kineto spells it, copy kind, which side is host memory).
COPY_SYMBOLS: dict[str, tuple[str, CopyKind, str | None]] = {
    "HTOD": ("HtoD", CopyKind.HTOD, "src"), "DTOH": ("DtoH", CopyKind.DTOH, "dst"),
    "HTOA": ("HtoA", CopyKind.HTOD, "src"), "ATOH": ("AtoH", CopyKind.DTOH, "dst"),
    "ATOA": ("AtoA", CopyKind.DTOD, None), "ATOD": ("AtoD", CopyKind.DTOD, None),
    "DTOA": ("DtoA", CopyKind.DTOD, None), "DTOD": ("DtoD", CopyKind.DTOD, None),
    "HTOH": ("HtoH", CopyKind.HTOH, None), "PTOP": ("PtoP", CopyKind.PTOP, None),
    "UVM_HTOD": ("HtoD", CopyKind.HTOD, "src"), "UVM_DTOH": ("DtoH", CopyKind.DTOH, "dst"),
    "UVM_DTOD": ("DtoD", CopyKind.DTOD, None),
}
MEMORY_LABELS = {
    "PAGEABLE": "Pageable", "PINNED": "Pinned", "DEVICE": "Device", "ARRAY": "Array", "MANAGED": "Managed",
    "DEVICE_STATIC": "Device Static", "MANAGED_STATIC": "Managed Static", "UNKNOWN": "Unknown",
}
HOST_MEMORY = {"PAGEABLE": HostMemory.PAGEABLE, "PINNED": HostMemory.PINNED}
UNKNOWN_COPY = ("Unknown", CopyKind.OTHER, None)
SYNC_BY_SHAPE = ("CONTEXT_SYNCHRONIZE", "EVENT_SYNCHRONIZE", "STREAM_SYNCHRONIZE", "STREAM_WAIT_EVENT")
SYNC_LABELS = {"EVENT_SYNCHRONIZE": "Event Sync", "STREAM_WAIT_EVENT": "Stream Wait Event",
               "STREAM_SYNCHRONIZE": "Stream Sync", "CONTEXT_SYNCHRONIZE": "Context Sync"}


def device_rows(ex: NsysDatabase, table: str, extra: Iterable[str] = (), high: str = "0") -> np.ndarray | None:
    """Rows of (start, end, where, link, *extra) with real timestamps; None without the table.

    Python ints cost more than the SQL that packs them, so each row comes as few values:
    where = pid << 40 | device << 32 | stream, and link = `high` << 32 | correlation id
    (CUPTI ids are 32-bit, pids 24-bit; device ids are taken to be under 256).
    """
    if table not in ex.tables:
        return None
    pid = f"(({ex.column(table, 'globalPid')} >> 24) & {0xFFFFFF})"
    device = f"({ex.column(table, 'deviceId', default='0')} & 255)"
    stream = f"({ex.column(table, 'streamId', default=str(INVALID_ID))} & {INVALID_ID})"
    corr = f"({ex.column(table, 'correlationId', default=str(INVALID_ID))} & {INVALID_ID})"
    # SQLite gives <<, >>, & and | one precedence, left to right: every group is bracketed.
    fields = ["start", "end", f"(({pid} << 40) | ({device} << 32) | {stream})", f"((({high}) << 32) | {corr})",
              *extra]
    rows = ex.ints(f"SELECT {', '.join(fields)} FROM {table}", len(fields), table)
    # CUPTI writes 0 for both timestamps when it could not collect them.
    valid = (rows[:, 1] >= rows[:, 0]) & ((rows[:, 0] != 0) | (rows[:, 1] != 0))
    if valid.all():
        return rows
    ex.notes.append(f"{int((~valid).sum())} rows of {table} without valid timestamps were left out")
    return rows[valid]


def device_block(kind: Kind, rows: np.ndarray, name: np.ndarray) -> Block:
    where, link = rows[:, 2], rows[:, 3]
    device = ((where >> 32) & 255).astype(np.int32)
    stream = absent_if(where & INVALID_ID, INVALID_ID)
    return {
        "kind": np.full(len(rows), kind, dtype=np.int8), "start": rows[:, 0], "end": rows[:, 1],
        # Like Kineto: a device row's pid is the device and its tid the stream.
        "pid": device.astype(np.int64), "tid": stream, "device": device, "stream": stream, "name": name,
        "correlation": absent_if(link & INVALID_ID, INVALID_ID),
        "process": absent_if((where >> 40) & 0xFFFFFF, 0xFFFFFF),
    }


def kernels(ex: NsysDatabase) -> Block | None:
    rows = device_rows(ex, KERNEL, high=ex.column(KERNEL, "demangledName", "shortName", default="0"))
    if rows is None:
        return None
    return device_block(Kind.KERNEL, rows, ex.names(rows[:, 3] >> 32))


def _memory_kinds(ex: NsysDatabase) -> dict[int, str]:
    return ex.enum("ENUM_CUDA_MEM_KIND", "CUDA_MEMOPR_MEMORY_KIND_") or MEMORY_KIND_FALLBACK


def memcpys(ex: NsysDatabase) -> Block | None:
    extra = ["bytes", ex.column(MEMCPY, "copyKind", default="0"), ex.column(MEMCPY, "srcKind"),
             ex.column(MEMCPY, "dstKind")]
    rows = device_rows(ex, MEMCPY, extra)
    if rows is None:
        return None
    copy_kinds = ex.enum("ENUM_CUDA_MEMCPY_OPER", "CUDA_MEMCPY_KIND_") or MEMCPY_KIND_FALLBACK
    memory_kinds = _memory_kinds(ex)
    # One name per distinct (direction, source, destination); the values are small enum ids.
    key = (rows[:, 5] << 42) | ((rows[:, 6] & 0x1FFFFF) << 21) | (rows[:, 7] & 0x1FFFFF)
    unique, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    lut_name = np.zeros(len(unique), dtype=np.int32)
    lut_kind = np.zeros(len(unique), dtype=np.int8)
    lut_memory = np.zeros(len(unique), dtype=np.int8)
    for i, row in enumerate(first.tolist()):
        copy, src, dst = (int(v) for v in rows[row, 5:8])
        short, kind, host_side = COPY_SYMBOLS.get(copy_kinds.get(copy, ""), UNKNOWN_COPY)
        src_kind, dst_kind = memory_kinds.get(src, "UNKNOWN"), memory_kinds.get(dst, "UNKNOWN")
        src_label, dst_label = _memory_label(src_kind), _memory_label(dst_kind)
        lut_name[i] = ex.intern(f"Memcpy {short} ({src_label} -> {dst_label})")
        lut_kind[i] = kind
        host = src_kind if host_side == "src" else dst_kind if host_side == "dst" else ""
        lut_memory[i] = HOST_MEMORY.get(host, HostMemory.UNKNOWN)
    inverse = inverse.reshape(-1)
    block = device_block(Kind.MEMCPY, rows, lut_name[inverse])
    block.update(bytes=rows[:, 4], copy_kind=lut_kind[inverse], host_memory=lut_memory[inverse])
    return block


def memsets(ex: NsysDatabase) -> Block | None:
    rows = device_rows(ex, MEMSET, ["bytes", ex.column(MEMSET, "memKind")])
    if rows is None:
        return None
    memory_kinds = _memory_kinds(ex)
    unique, inverse = np.unique(rows[:, 5], return_inverse=True)
    lut = np.array([ex.intern(f"Memset ({_memory_label(memory_kinds.get(int(k), 'UNKNOWN'))})")
                    for k in unique], dtype=np.int32)
    block = device_block(Kind.MEMSET, rows, lut[inverse.reshape(-1)])
    block["bytes"] = rows[:, 4]
    return block


def syncs(ex: NsysDatabase) -> Block | None:
    rows = device_rows(ex, SYNC, [ex.column(SYNC, "eventId")], high=ex.column(SYNC, "syncType", default="0"))
    if rows is None:
        return None
    numbering = ex.enum("ENUM_CUPTI_SYNC_TYPE", "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_")
    if numbering:
        codes = rows[:, 3] >> 32
    else:
        # Exports without the enum numbered sync types their own way, but the record's shape tells: CUPTI
        # leaves the stream out of context and event syncs, and the event out of context and stream syncs.
        stream_known = (rows[:, 2] & INVALID_ID) != INVALID_ID
        event_known = (rows[:, 4] >= 0) & (rows[:, 4] != INVALID_ID)
        codes = stream_known * 2 + event_known
        numbering = dict(enumerate(SYNC_BY_SHAPE))
    unique, inverse = np.unique(codes, return_inverse=True)
    lut = np.array([ex.intern(SYNC_LABELS.get(numbering.get(int(c), ""), "Sync")) for c in unique],
                   dtype=np.int32)
    return device_block(Kind.GPU_SYNC, rows, lut[inverse.reshape(-1)])


def _memory_label(symbol: str) -> str:
    return MEMORY_LABELS.get(symbol, symbol.replace("_", " ").title())
