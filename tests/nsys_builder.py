"""Build Nsight Systems SQLite exports with known answers, for exact tests of the nsys reader.

Tables are created the way `nsys export --type sqlite` creates them, and only when they have rows
(nsys creates them lazily too). The statements were copied from the real exports in
../shared/traces/nsys/ via sqlite_master (nsys 2022.1, export schema 2.9.1; OSRT_API from the 2021
export), comments dropped. Those exports have no NVTX_EVENTS and no ENUM_* tables, so these two follow
the documented schema of nsys 2024.6 (export schema 3.16.1), enum rows included.
Times are integer ns, as nsys writes them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

PID = 4242
MAIN_TID = 4242
WORKER_TID = 4250
DEVICE = 0
STREAM = 7
INVALID = 0xFFFFFFFF  # CUPTI's "no stream" / "no event"
SESSION_START_NS = 1_700_000_000_000_000_000

# nsys enum values (ENUM_CUDA_MEMCPY_OPER, ENUM_CUDA_MEM_KIND, ENUM_CUPTI_SYNC_TYPE, NVTX event types).
HTOD, DTOH, DTOD, PTOP = 1, 2, 8, 10
PAGEABLE, PINNED, DEVICE_MEMORY = 0, 1, 2
EVENT_SYNC, STREAM_WAIT, STREAM_SYNC, CONTEXT_SYNC = 1, 2, 3, 4
NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE = 34, 59, 60, 75

# The suffixes CUPTI gives API names (cudaLaunchKernel_v7000), as the real exports show them.
API_VERSIONS = {"cudaLaunchKernel": "_v7000", "cudaStreamDestroy": "_v5050"}

SCHEMA: dict[str, str] = {
    "StringIds": """CREATE TABLE StringIds (
    id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)""",
    "ThreadNames": """CREATE TABLE ThreadNames (
    nameId INTEGER NOT NULL REFERENCES StringIds(id), priority INTEGER, globalTid INTEGER)""",
    "PROCESSES": """CREATE TABLE PROCESSES (
    globalPid INTEGER, pid INTEGER, name TEXT)""",
    "CUPTI_ACTIVITY_KIND_KERNEL": """CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
    correlationId INTEGER REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId), globalPid INTEGER,
    demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER,
    launchType INTEGER, cacheConfig INTEGER, registersPerThread INTEGER NOT NULL,
    gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL,
    blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL,
    dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL,
    localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER,
    graphNodeId INTEGER REFERENCES CUDA_GRAPH_EVENTS(graphNodeId), sharedMemoryLimitConfig INTEGER)""",
    "CUPTI_ACTIVITY_KIND_MEMCPY": """CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
    correlationId INTEGER REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId), globalPid INTEGER,
    bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER,
    dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER,
    dstContextId INTEGER, migrationCause INTEGER,
    graphNodeId INTEGER REFERENCES CUDA_GRAPH_EVENTS(graphNodeId), virtualAddress INTEGER)""",
    "CUPTI_ACTIVITY_KIND_MEMSET": """CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
    correlationId INTEGER REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId), globalPid INTEGER,
    value INTEGER NOT NULL, bytes INTEGER NOT NULL,
    graphNodeId INTEGER REFERENCES CUDA_GRAPH_EVENTS(graphNodeId), memKind INTEGER)""",
    "CUPTI_ACTIVITY_KIND_RUNTIME": """CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER,
    correlationId INTEGER, nameId INTEGER NOT NULL REFERENCES StringIds(id),
    returnValue INTEGER NOT NULL, callchainId INTEGER REFERENCES CUDA_CALLCHAINS(id))""",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": """CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    syncType INTEGER NOT NULL, eventId INTEGER NOT NULL)""",
    "OSRT_API": """CREATE TABLE OSRT_API (
    start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER,
    correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, nestingLevel INTEGER,
    callchainId INTEGER NOT NULL)""",
    "TARGET_INFO_GPU": """CREATE TABLE TARGET_INFO_GPU (
    vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER,
    l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER,
    smCount INTEGER, pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER,
    ctxswDevPath TEXT, ctrlDevPath TEXT, revision INTEGER, nodeMask INTEGER, constantMemory INTEGER,
    maxIPC INTEGER, maxRegistersPerBlock INTEGER, maxShmemPerBlock INTEGER,
    maxShmemPerBlockOptin INTEGER, maxShmemPerSm INTEGER, maxRegistersPerSm INTEGER,
    threadsPerWarp INTEGER, asyncEngines INTEGER, maxWarpsPerSm INTEGER, maxBlocksPerSm INTEGER,
    maxThreadsPerBlock INTEGER, maxBlockDimX INTEGER, maxBlockDimY INTEGER, maxBlockDimZ INTEGER,
    maxGridDimX INTEGER, maxGridDimY INTEGER, maxGridDimZ INTEGER, computeMajor INTEGER,
    computeMinor INTEGER, smMajor INTEGER, smMinor INTEGER)""",
    "TARGET_INFO_SESSION_START_TIME": """CREATE TABLE TARGET_INFO_SESSION_START_TIME (
    utcEpochNs INTEGER, utcTime TEXT, localTime TEXT)""",
    "EXPORT_META_DATA": """CREATE TABLE EXPORT_META_DATA (
    name TEXT NOT NULL, value TEXT)""",
    # Documented schema (no real export here has these tables).
    "NVTX_EVENTS": """CREATE TABLE NVTX_EVENTS (
    start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER,
    color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER,
    uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER,
    floatValue REAL, jsonTextId INTEGER, jsonText TEXT, binaryData TEXT)""",
    **{table: f"""CREATE TABLE {table} (
    id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)"""
       for table in ("ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND", "ENUM_CUPTI_SYNC_TYPE",
                     "ENUM_NSYS_EVENT_TYPE")},
}

ENUM_ROWS: dict[str, list[tuple[int, str, str]]] = {
    "ENUM_CUDA_MEMCPY_OPER": [
        (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"), (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"), (3, "CUDA_MEMCPY_KIND_HTOA", "Host-to-Array"),
        (4, "CUDA_MEMCPY_KIND_ATOH", "Array-to-Host"), (5, "CUDA_MEMCPY_KIND_ATOA", "Array-to-Array"),
        (6, "CUDA_MEMCPY_KIND_ATOD", "Array-to-Device"), (7, "CUDA_MEMCPY_KIND_DTOA", "Device-to-Array"),
        (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"), (9, "CUDA_MEMCPY_KIND_HTOH", "Host-to-Host"),
        (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"),
        (11, "CUDA_MEMCPY_KIND_UVM_HTOD", "Unified Host-to-Device"),
        (12, "CUDA_MEMCPY_KIND_UVM_DTOH", "Unified Device-to-Host"),
        (13, "CUDA_MEMCPY_KIND_UVM_DTOD", "Unified Device-to-Device"),
    ],
    "ENUM_CUDA_MEM_KIND": [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"), (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"), (3, "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array"),
        (4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"),
        (5, "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static"),
        (6, "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static"),
        (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"),
    ],
    "ENUM_CUPTI_SYNC_TYPE": [
        (0, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN", "Unknown"),
        (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"),
        (2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "Stream wait sync"),
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
        (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"),
    ],
    "ENUM_NSYS_EVENT_TYPE": [
        (34, "NvtxMark", "NvtxMark"), (59, "NvtxPushPopRange", "NvtxPushPopRange"),
        (60, "NvtxStartEndRange", "NvtxStartEndRange"), (75, "NvtxDomainCreate", "NvtxDomainCreate"),
    ],
}

# Only the columns the builder fills; the rest stay NULL, as nsys leaves unknown values.
INSERT = {
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start, end, deviceId, contextId, streamId, correlationId, globalPid, demangledName, shortName, "
        "registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, "
        "dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId",
        "?, ?, ?, 1, ?, ?, ?, ?, ?, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, ?"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start, end, deviceId, contextId, streamId, correlationId, globalPid, bytes, copyKind, srcKind, "
        "dstKind", "?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?"),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start, end, deviceId, contextId, streamId, correlationId, globalPid, value, bytes, memKind",
        "?, ?, ?, 1, ?, ?, ?, 0, ?, ?"),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (
        "start, end, deviceId, contextId, streamId, correlationId, globalPid, syncType, eventId",
        "?, ?, ?, 1, ?, ?, ?, ?, ?"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start, end, eventClass, globalTid, correlationId, nameId, returnValue, callchainId",
        "?, ?, ?, ?, ?, ?, 0, ?"),
    "NVTX_EVENTS": ("start, end, eventType, rangeId, text, globalTid, textId, domainId",
                    "?, ?, ?, ?, ?, ?, ?, ?"),
    "OSRT_API": ("start, end, eventClass, globalTid, nameId, returnValue, nestingLevel, callchainId",
                 "?, ?, 27, ?, ?, 0, 0, 0"),
    "ThreadNames": ("nameId, priority, globalTid", "?, 10, ?"),
    "PROCESSES": ("globalPid, pid, name", "?, ?, ?"),
    "TARGET_INFO_GPU": (
        "vmId, id, name, busLocation, isDiscrete, totalMemory, smCount, chipName, cuDevice, threadsPerWarp, "
        "computeMajor, computeMinor", "?, ?, ?, ?, 1, ?, ?, ?, ?, 32, ?, ?"),
    "TARGET_INFO_SESSION_START_TIME": ("utcEpochNs, utcTime, localTime", "?, ?, ?"),
    "EXPORT_META_DATA": ("name, value", "?, ?"),
}


def global_id(tid: int = 0, pid: int = PID) -> int:
    """nsys's serialized thread (or, with tid 0, process) id: host bits | pid << 24 | tid."""
    return (1 << 56) | (pid << 24) | tid


@dataclass
class NsysBuilder:
    """An export being built: call the event methods, then `write(path)`."""

    enums: bool = True  # write ENUM_* tables (newer exports) or leave them out (older ones)
    versioned_names: bool = True  # cudaMemcpyAsync_v3020, as CUPTI names runtime calls
    duplicate_runtime: bool = False  # older exports: each call twice, versioned inside plain
    nvtx: bool = True  # an export of a capture without NVTX tracing has no NVTX_EVENTS table
    gpus: tuple[tuple[str, int, int, int, int], ...] = (("NVIDIA A100-SXM4-80GB", 80 * 2**30, 108, 8, 0),)
    rows: dict[str, list[tuple]] = field(default_factory=dict)
    _strings: dict[str, int] = field(default_factory=dict)
    _correlation: Iterator[int] = field(default_factory=lambda: count(1))
    _grid: Iterator[int] = field(default_factory=lambda: count(1))

    def string(self, text: str) -> int:
        return self._strings.setdefault(text, len(self._strings))

    def _add(self, table: str, *row: Any) -> None:
        self.rows.setdefault(table, []).append(row)

    # -- host ------------------------------------------------------------------------------------
    def runtime(self, name: str, start: int, end: int, tid: int = MAIN_TID, pid: int = PID) -> int:
        """A CUDA API call; returns its correlation id."""
        corr = next(self._correlation)
        versioned = name + API_VERSIONS.get(name, "_v3020") if name.startswith("cuda") else name
        stored = versioned if self.versioned_names else name
        if self.duplicate_runtime:  # the plain row encloses the versioned one, as in the 2021 export
            self._add("CUPTI_ACTIVITY_KIND_RUNTIME", start - 50, end + 50, 67, global_id(tid, pid), corr,
                      self.string(name), corr)
            stored = versioned
        self._add("CUPTI_ACTIVITY_KIND_RUNTIME", start, end, 0, global_id(tid, pid), corr, self.string(stored),
                  None)
        return corr

    def nvtx_range(self, text: str, start: int, end: int | None, tid: int = MAIN_TID, *, domain: int = 0,
                   registered: bool = False, event_type: int = NVTX_PUSH_POP) -> None:
        """A push/pop (or start/end) range; registered strings go through StringIds like nsys writes them."""
        text_id = self.string(text) if registered else None
        self._add("NVTX_EVENTS", start, end, event_type, None, None if registered else text, global_id(tid),
                  text_id, domain)

    def nvtx_domain(self, domain: int, name: str, start: int, tid: int = MAIN_TID) -> None:
        self._add("NVTX_EVENTS", start, None, NVTX_DOMAIN_CREATE, None, name, global_id(tid), None, domain)

    def osrt(self, name: str, start: int, end: int, tid: int = MAIN_TID) -> None:
        self._add("OSRT_API", start, end, global_id(tid), self.string(name))

    def thread_name(self, tid: int, name: str) -> None:
        self._add("ThreadNames", self.string(name), global_id(tid))

    # -- device ----------------------------------------------------------------------------------
    def kernel(self, name: str, start: int, end: int, correlation: int, stream: int = STREAM,
               short: str | None = None, pid: int = PID) -> None:
        short_id = self.string(short or name.split("(")[0].split("<")[0].split()[-1])
        self._add("CUPTI_ACTIVITY_KIND_KERNEL", start, end, DEVICE, stream, correlation, global_id(0, pid),
                  self.string(name), short_id, next(self._grid))

    def memcpy(self, start: int, end: int, correlation: int, nbytes: int, copy_kind: int, src: int, dst: int,
               stream: int = STREAM) -> None:
        self._add("CUPTI_ACTIVITY_KIND_MEMCPY", start, end, DEVICE, stream, correlation, global_id(), nbytes,
                  copy_kind, src, dst)

    def memset(self, start: int, end: int, correlation: int, nbytes: int, stream: int = STREAM) -> None:
        self._add("CUPTI_ACTIVITY_KIND_MEMSET", start, end, DEVICE, stream, correlation, global_id(), nbytes,
                  DEVICE_MEMORY)

    def sync(self, start: int, end: int, correlation: int, sync_type: int, stream: int = INVALID,
             event: int = INVALID) -> None:
        self._add("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", start, end, DEVICE, stream, correlation, global_id(),
                  sync_type, event)

    # -- output ----------------------------------------------------------------------------------
    def write(self, path: str | Path) -> Path:
        """Write the export; tables without rows are not created, as nsys does."""
        path = Path(path)
        tables = {t: r for t, r in self.rows.items() if r and (self.nvtx or t != "NVTX_EVENTS")}
        tables["StringIds"] = [(i, s) for s, i in self._strings.items()]
        tables["PROCESSES"] = [(global_id(), PID, "python")]
        tables["TARGET_INFO_GPU"] = [
            (1 << 56, i, name, f"0000:{i:02x}:00.0", memory, sms, "GA100", i, major, minor)
            for i, (name, memory, sms, major, minor) in enumerate(self.gpus)]
        utc = "2023-11-14T22:13:20"
        tables["TARGET_INFO_SESSION_START_TIME"] = [(SESSION_START_NS, utc, utc)]
        tables["EXPORT_META_DATA"] = [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
                                      ("EXPORT_SCHEMA_VERSION", "2.9.1")]
        with closing(sqlite3.connect(path)) as db:
            for table, rows in tables.items():
                db.execute(SCHEMA[table])
                _insert(db, table, rows)
            if self.enums:
                for table, rows in ENUM_ROWS.items():
                    db.execute(SCHEMA[table])
                    db.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", rows)
            db.commit()
        return path


def _insert(db: sqlite3.Connection, table: str, rows: Iterable[tuple]) -> None:
    if table == "StringIds":
        db.executemany("INSERT INTO StringIds VALUES (?, ?)", rows)
        return
    columns, values = INSERT[table]
    db.executemany(f"INSERT INTO {table} ({columns}) VALUES ({values})", rows)


# -- ready-made exports -----------------------------------------------------------------------------
LOOP_START = 2_000_000  # ns since the session start
BATCH_BYTES = 3 * 224 * 224 * 4 * 32  # a float32 image batch, copied from pageable memory
LOSS_BYTES = 4
KERNEL_NAMES = (
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
     "vectorized_elementwise_kernel"),
    ("ampere_sgemm_32x32_sliced1x4_tn", "ampere_sgemm_32x32_sliced1x4_tn"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, "
     "float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, "
     "float, float>, unsigned int, float, 4>)", "reduce_kernel"),
)
KERNEL_NS = 1_500  # tiny kernels: the GPU waits for the host between them
LAUNCH_NS = 4_000
LAUNCH_GAP_NS = 5_000
DATA_DOMAIN = 1


def training_loop(steps: int = 5, kernels_per_step: int = 24, **options: Any) -> NsysBuilder:
    """A PyTorch-like loop under `nsys profile -t cuda,nvtx,osrt`: each step copies a pageable batch to
    the GPU and waits for it, launches many tiny kernels and reads the loss back with `.item()`."""
    b = NsysBuilder(**options)
    b.thread_name(MAIN_TID, "python")
    b.thread_name(WORKER_TID, "pt_data_worker")
    b.nvtx_domain(DATA_DOMAIN, "data", LOOP_START, tid=WORKER_TID)
    t = LOOP_START
    for _ in range(steps):
        step_start = t
        # x.to("cuda") from pageable memory, then the sync the staged copy forces.
        corr = b.runtime("cudaMemcpyAsync", t, t + 15_000)
        b.memcpy(t + 5_000, t + 65_000, corr, BATCH_BYTES, HTOD, PAGEABLE, DEVICE_MEMORY)
        t += 15_000
        corr = b.runtime("cudaStreamSynchronize", t, t + 55_000)
        b.sync(t + 1_000, t + 54_000, corr, STREAM_SYNC, stream=STREAM)
        t += 56_000
        half = kernels_per_step // 2
        for phase, launches in (("forward", half), ("backward", kernels_per_step - half)):
            phase_start = t
            for k in range(launches):
                corr = b.runtime("cudaLaunchKernel", t, t + LAUNCH_NS)
                name, short = KERNEL_NAMES[k % len(KERNEL_NAMES)]
                b.kernel(name, t + 3_000, t + 3_000 + KERNEL_NS, corr, short=short)
                t += LAUNCH_GAP_NS
            b.nvtx_range(phase, phase_start, t)
        opt_start = t
        corr = b.runtime("cudaMemsetAsync", t, t + 3_000)  # zero_grad
        b.memset(t + 2_000, t + 2_500, corr, 4 * 1024 * 1024)
        t += 4_000
        b.nvtx_range("optimizer", opt_start, t)
        # loss.item(): a 4-byte copy to pageable memory and a sync.
        corr = b.runtime("cudaMemcpyAsync", t, t + 8_000)
        b.memcpy(t + 6_000, t + 7_000, corr, LOSS_BYTES, DTOH, DEVICE_MEMORY, PAGEABLE)
        t += 8_000
        corr = b.runtime("cudaStreamSynchronize", t, t + 2_000)
        b.sync(t + 100, t + 1_900, corr, STREAM_SYNC, stream=STREAM)
        t += 2_000
        b.nvtx_range("train_step", step_start, t)
        # The DataLoader worker reads the next batch meanwhile.
        b.osrt("read", step_start + 1_000, step_start + 40_000, tid=WORKER_TID)
        b.nvtx_range("prefetch", step_start, step_start + 45_000, tid=WORKER_TID, domain=DATA_DOMAIN,
                     registered=True, event_type=NVTX_START_END)
        t += 20_000  # Python between steps
    return b


def many_kernels(path: str | Path, n: int) -> Path:
    """An export of `n` kernels, each launched by one cudaLaunchKernel call: a reader benchmark."""
    b = NsysBuilder(enums=True, nvtx=False)
    launch, name = b.string("cudaLaunchKernel_v7000"), b.string(KERNEL_NAMES[0][0])
    short = b.string(KERNEL_NAMES[0][1])
    b.thread_name(MAIN_TID, "python")
    path = b.write(path)
    tid = global_id(MAIN_TID)
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("DELETE FROM StringIds")
        _insert(db, "StringIds", [(i, s) for s, i in b._strings.items()])
        for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"):
            db.execute(SCHEMA[table])
        t0 = LOOP_START
        _insert(db, "CUPTI_ACTIVITY_KIND_RUNTIME",
                ((t0 + i * 5_000, t0 + i * 5_000 + 4_000, 0, tid, i + 1, launch, None) for i in range(n)))
        _insert(db, "CUPTI_ACTIVITY_KIND_KERNEL",
                ((t0 + i * 5_000 + 3_000, t0 + i * 5_000 + 4_500, DEVICE, STREAM, i + 1, global_id(), name,
                  short, i + 1) for i in range(n)))
        db.commit()
    return path
