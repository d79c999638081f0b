"""Reader for Nsight Systems SQLite exports (`nsys export --type sqlite`) into the columnar model.

Columns come out of SQLite with one query per table and go straight into numpy; names are looked up
once per distinct string id. nsys already stores integer nanoseconds, so times are only shifted.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import closing
from itertools import chain
from pathlib import Path

import numpy as np

from stepscope.errors import StepscopeError
from stepscope.trace.model import NONE, CopyKind, DeviceInfo, Events, HostMemory, Kind, Trace, TraceMeta

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
OSRT = "OSRT_API"
OVERHEAD = "PROFILER_OVERHEAD"
EVENT_TABLES = (KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER, SYNC, NVTX, OSRT, OVERHEAD)
# Tables every nsys export has, events or not: they tell an empty export from some other database.
NSYS_MARKER_TABLES = ("StringIds", "ThreadNames", "TARGET_INFO_GPU", "EXPORT_META_DATA", "META_DATA_EXPORT")

NVTX_RANGE_TYPES = (59, 60, 70, 71)  # push/pop and start/end ranges, from NVTX and from NVTXT files
NVTX_DOMAIN_CREATE = 75
INVALID_ID = 0xFFFFFFFF  # CUPTI's "no stream" / "no event"
VERSION_SUFFIX = re.compile(r"_v\d+$")  # cudaLaunchKernel_v7000 -> cudaLaunchKernel

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

Block = dict[str, np.ndarray]  # one table's rows as event columns, plus "process" for correlation scoping
_ID_CHUNK = 500  # ids per `IN (...)` lookup, under SQLite's oldest bound-parameter limit


def read_nsys(path: str | Path) -> Trace:
    """Read one Nsight Systems SQLite export into the columnar model."""
    path = Path(path)
    if not path.exists():
        raise StepscopeError(f"{path}: no such file or folder")
    if path.is_dir():
        raise StepscopeError(f"{path}: is a folder, expected a trace file")
    if path.stat().st_size == 0:
        raise StepscopeError(f"{path}: file is empty")
    try:
        # immutable: no locks and no journal lookups, so read-only folders and copied files both work.
        uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
        with closing(sqlite3.connect(uri, uri=True)) as db:
            db.text_factory = lambda raw: raw.decode("utf-8", "replace")  # user text need not be UTF-8
            return _Export(db, path).read()
    except sqlite3.Error as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise StepscopeError(f"{path}: not a readable SQLite database ({message})") from None


class _Export:
    """One open export: its schema, its string table, and the readers of each event table."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db = db
        self.path = path
        self.tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        self._columns: dict[str, set[str]] = {}
        self.strings: dict[str, int] = {}  # our string table, in first-seen order
        self.notes: list[str] = []

    # -- schema and fetching -----------------------------------------------------------------------
    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            rows = self.db.execute(f'PRAGMA table_info("{table}")') if table in self.tables else []
            self._columns[table] = {row[1] for row in rows}
        return self._columns[table]

    def column(self, table: str, *names: str, default: str = "-1") -> str:
        """SQL for the first of `names` the table has, NULLs as `default`; `default` when it has none."""
        present = [n for n in names if n in self.columns(table)]
        return f"coalesce({', '.join([*present, default])})" if present else default

    def ints(self, sql: str, width: int, table: str) -> np.ndarray:
        """Rows of integers as an (n, width) int64 array, without building a list of rows."""
        try:
            flat = np.fromiter(chain.from_iterable(self.db.execute(sql)), dtype=np.int64)
        except sqlite3.OperationalError as exc:  # a table of that name, but not nsys's columns
            raise StepscopeError(f"{self.path}: {table} is not as Nsight Systems writes it ({exc})") from None
        except (TypeError, ValueError, OverflowError):
            raise StepscopeError(f"{self.path}: {table} holds values that are not integers") from None
        return flat.reshape(-1, width)

    def intern(self, text: str) -> int:
        return self.strings.setdefault(text, len(self.strings))

    def lookup(self, ids: Iterable[int]) -> dict[int, str]:
        """StringIds values for the given ids, fetched in chunks."""
        ids = list(ids)
        found: dict[int, str] = {}
        if "StringIds" not in self.tables:
            return found
        for i in range(0, len(ids), _ID_CHUNK):
            chunk = ids[i:i + _ID_CHUNK]
            marks = ", ".join("?" * len(chunk))
            rows = self.db.execute(f"SELECT id, value FROM StringIds WHERE id IN ({marks})", chunk)
            found.update((i, v) for i, v in rows if isinstance(v, str))
        return found

    def names(self, ids: np.ndarray, clean: Callable[[str], str] = str) -> np.ndarray:
        """Map nsys string ids to our string table, looking each distinct id up once."""
        lut, inverse = self.name_lut(ids, clean)
        return lut[inverse]

    def name_lut(self, ids: np.ndarray, clean: Callable[[str], str] = str) -> tuple[np.ndarray, np.ndarray]:
        """Our string index per distinct id, and each row's position among the distinct ids."""
        unique, inverse = np.unique(ids, return_inverse=True)
        found = self.lookup(unique.tolist())
        lut = np.array([self.intern(clean(found.get(i, f"<unknown name {i}>"))) for i in unique.tolist()],
                       dtype=np.int32)
        return lut, inverse.reshape(-1)

    def enum(self, table: str, prefix: str) -> dict[int, str]:
        """An ENUM_* table as id -> symbol without its prefix; empty when the export has none."""
        if table not in self.tables or not {"id", "name"} <= self.columns(table):
            return {}
        return {int(i): str(name).removeprefix(prefix) for i, name in self.db.execute(
            f"SELECT id, name FROM {table} WHERE name IS NOT NULL")}

    # -- the whole export --------------------------------------------------------------------------
    def read(self) -> Trace:
        present = [t for t in EVENT_TABLES if t in self.tables]
        if not present:
            if any(t in self.tables for t in NSYS_MARKER_TABLES):
                raise StepscopeError(
                    f"{self.path}: the Nsight Systems export holds no CUDA, NVTX or OS runtime events",
                    hint="record with: nsys profile -t cuda,nvtx,osrt ...",
                )
            raise StepscopeError(
                f"{self.path}: not an Nsight Systems export "
                "(no CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS or OSRT_API tables)",
                hint="export a report with: nsys export --type sqlite --output report.sqlite report.nsys-rep",
            )
        readers = (self.kernels, self.memcpys, self.memsets, self.syncs, self.runtime_calls, self.nvtx_ranges,
                   lambda: self.host_calls(OSRT), lambda: self.host_calls(OVERHEAD))
        blocks = [b for b in (read() for read in readers) if b]
        if not sum(len(b["start"]) for b in blocks):
            raise StepscopeError(f"{self.path}: the export has no events with a duration (nothing to read)")
        return self.assemble(blocks)

    def assemble(self, blocks: list[Block]) -> Trace:
        names = dict.fromkeys(k for b in blocks for k in b)
        columns = {k: np.concatenate([_column(b, k) for b in blocks]) for k in names}
        end = columns.pop("end")
        open_ranges = end < 0  # NVTX ranges still open when the capture stopped
        if open_ranges.any():
            end[open_ranges] = max(int(end.max()), int(columns["start"].max()))
            count = int(open_ranges.sum())
            self.notes.append(f"{count} NVTX ranges were still open when the capture stopped: "
                              "they end at the trace end")
        self.scope_correlations(columns)
        del columns["process"]
        start = columns.pop("start")
        t0 = int(start.min())
        events = Events.from_columns(start=start - t0, dur=end - start, **columns)
        host = np.flatnonzero(events.device < 0)
        cuda = events.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.RUNTIME).any()
        devices = self.devices()
        if cuda and not devices:
            self.notes.append("the export has no GPU description (TARGET_INFO_GPU): "
                              "device name and limits are unknown")
        self.sampling_note()
        process_names, thread_names = self.thread_names(events.pid[host], events.tid[host])
        epoch = self.session_start()
        meta = TraceMeta(
            path=str(self.path),
            format="nsys",
            devices=tuple(devices),
            accelerator="cuda" if cuda else "none",
            start_epoch_ns=epoch + t0 if epoch is not None else None,
            process_names=process_names,
            thread_names=thread_names,
            notes=tuple(self.notes),
        )
        return Trace(meta=meta, events=events, strings=tuple(self.strings))

    def scope_correlations(self, columns: dict[str, np.ndarray]) -> None:
        """CUPTI correlation ids count per process: with several CUDA processes, put the process in the id."""
        corr, process = columns["correlation"], columns["process"]
        linked = (corr >= 0) & (process >= 0)
        processes = np.unique(process[linked])
        if len(processes) > 1:
            corr[linked] = (process[linked] << 32) | corr[linked]
            self.notes.append(f"{len(processes)} processes recorded CUDA activity: correlation ids are "
                              "process id << 32 | CUPTI correlation id")

    # -- GPU activities ----------------------------------------------------------------------------
    def device_rows(self, table: str, extra: Iterable[str] = (), high: str = "0") -> np.ndarray | None:
        """Rows of (start, end, where, link, *extra) with real timestamps; None without the table.

        Python ints cost more than the SQL that packs them, so each row comes as few values:
        where = pid << 40 | device << 32 | stream, and link = `high` << 32 | correlation id
        (CUPTI ids are 32-bit, pids 24-bit; device ids are taken to be under 256).
        """
        if table not in self.tables:
            return None
        pid = f"(({self.column(table, 'globalPid')} >> 24) & {0xFFFFFF})"
        device = f"({self.column(table, 'deviceId', default='0')} & 255)"
        stream = f"({self.column(table, 'streamId', default=str(INVALID_ID))} & {INVALID_ID})"
        corr = f"({self.column(table, 'correlationId', default=str(INVALID_ID))} & {INVALID_ID})"
        # SQLite gives <<, >>, & and | one precedence, left to right: every group is bracketed.
        fields = ["start", "end", f"(({pid} << 40) | ({device} << 32) | {stream})", f"((({high}) << 32) | {corr})",
                  *extra]
        rows = self.ints(f"SELECT {', '.join(fields)} FROM {table}", len(fields), table)
        # CUPTI writes 0 for both timestamps when it could not collect them.
        valid = (rows[:, 1] >= rows[:, 0]) & ((rows[:, 0] != 0) | (rows[:, 1] != 0))
        if valid.all():
            return rows
        self.notes.append(f"{int((~valid).sum())} rows of {table} without valid timestamps were left out")
        return rows[valid]

    def device_block(self, kind: Kind, rows: np.ndarray, name: np.ndarray) -> Block:
        where, link = rows[:, 2], rows[:, 3]
        device = ((where >> 32) & 255).astype(np.int32)
        stream = _absent_if(where & INVALID_ID, INVALID_ID)
        return {
            "kind": np.full(len(rows), kind, dtype=np.int8), "start": rows[:, 0], "end": rows[:, 1],
            # Like Kineto: a device row's pid is the device and its tid the stream.
            "pid": device.astype(np.int64), "tid": stream, "device": device, "stream": stream, "name": name,
            "correlation": _absent_if(link & INVALID_ID, INVALID_ID),
            "process": _absent_if((where >> 40) & 0xFFFFFF, 0xFFFFFF),
        }

    def kernels(self) -> Block | None:
        rows = self.device_rows(KERNEL, high=self.column(KERNEL, "demangledName", "shortName", default="0"))
        if rows is None:
            return None
        return self.device_block(Kind.KERNEL, rows, self.names(rows[:, 3] >> 32))

    def memory_kinds(self) -> dict[int, str]:
        return self.enum("ENUM_CUDA_MEM_KIND", "CUDA_MEMOPR_MEMORY_KIND_") or MEMORY_KIND_FALLBACK

    def memcpys(self) -> Block | None:
        extra = ["bytes", self.column(MEMCPY, "copyKind", default="0"), self.column(MEMCPY, "srcKind"),
                 self.column(MEMCPY, "dstKind")]
        rows = self.device_rows(MEMCPY, extra)
        if rows is None:
            return None
        copy_kinds = self.enum("ENUM_CUDA_MEMCPY_OPER", "CUDA_MEMCPY_KIND_") or MEMCPY_KIND_FALLBACK
        memory_kinds = self.memory_kinds()
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
            lut_name[i] = self.intern(f"Memcpy {short} ({src_label} -> {dst_label})")
            lut_kind[i] = kind
            host = src_kind if host_side == "src" else dst_kind if host_side == "dst" else ""
            lut_memory[i] = HOST_MEMORY.get(host, HostMemory.UNKNOWN)
        inverse = inverse.reshape(-1)
        block = self.device_block(Kind.MEMCPY, rows, lut_name[inverse])
        block.update(bytes=rows[:, 4], copy_kind=lut_kind[inverse], host_memory=lut_memory[inverse])
        return block

    def memsets(self) -> Block | None:
        rows = self.device_rows(MEMSET, ["bytes", self.column(MEMSET, "memKind")])
        if rows is None:
            return None
        memory_kinds = self.memory_kinds()
        unique, inverse = np.unique(rows[:, 5], return_inverse=True)
        lut = np.array([self.intern(f"Memset ({_memory_label(memory_kinds.get(int(k), 'UNKNOWN'))})")
                        for k in unique], dtype=np.int32)
        block = self.device_block(Kind.MEMSET, rows, lut[inverse.reshape(-1)])
        block["bytes"] = rows[:, 4]
        return block

    def syncs(self) -> Block | None:
        rows = self.device_rows(SYNC, [self.column(SYNC, "eventId")], high=self.column(SYNC, "syncType", default="0"))
        if rows is None:
            return None
        numbering = self.enum("ENUM_CUPTI_SYNC_TYPE", "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_")
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
        lut = np.array([self.intern(SYNC_LABELS.get(numbering.get(int(c), ""), "Sync")) for c in unique],
                       dtype=np.int32)
        return self.device_block(Kind.GPU_SYNC, rows, lut[inverse.reshape(-1)])

    # -- host threads ------------------------------------------------------------------------------
    def host_block(self, kind: Kind, rows: np.ndarray, name: np.ndarray,
                   correlation: np.ndarray | None = None) -> Block:
        """Rows of (start, end, globalTid, ...) on the host thread the global id names."""
        known = rows[:, 2] >= 0
        pid = np.where(known, (rows[:, 2] >> 24) & 0xFFFFFF, NONE)
        block = {
            "kind": np.full(len(rows), kind, dtype=np.int8), "start": rows[:, 0], "end": rows[:, 1],
            "pid": pid, "tid": np.where(known, rows[:, 2] & 0xFFFFFF, NONE), "name": name, "process": pid,
        }
        if correlation is not None:
            block["correlation"] = correlation
        return block

    def runtime_calls(self) -> Block | None:
        """CUDA runtime and driver API calls, each counted once."""
        parts = []
        for table in (RUNTIME, DRIVER):
            if table in self.tables:
                # Packed like device rows: the thread's 48-bit id, and name id << 32 | correlation id.
                thread = f"coalesce({self.column(table, 'globalTid', default='NULL')} & {(1 << 48) - 1}, -1)"
                corr = f"({self.column(table, 'correlationId', default=str(INVALID_ID))} & {INVALID_ID})"
                fields = ["start", "end", thread, f"((nameId << 32) | {corr})"]
                parts.append(self.ints(f"SELECT {', '.join(fields)} FROM {table}", len(fields), table))
        if not parts:
            return None
        rows = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if not (rows[:, 1] >= rows[:, 0]).all():
            rows = rows[rows[:, 1] >= rows[:, 0]]
        corr = _absent_if(rows[:, 3] & INVALID_ID, INVALID_ID)
        lut, inverse = self.name_lut(rows[:, 3] >> 32, clean=lambda s: VERSION_SUFFIX.sub("", s))
        name = lut[inverse]
        if len(np.unique(lut)) < len(lut):  # versioned and plain names of one call: older exports
            keep = _first_of_duplicates(rows[:, 0], rows[:, 1], rows[:, 2], corr, name)
            if len(keep) < len(rows):
                self.notes.append(f"{len(rows) - len(keep)} CUDA API calls were recorded twice (versioned and "
                                  "plain name): each is counted once")
                rows, name, corr = rows[keep], name[keep], corr[keep]
        return self.host_block(Kind.RUNTIME, rows, name, correlation=corr)

    def host_calls(self, table: str) -> Block | None:
        """OS runtime calls or profiler overhead on host threads, as OTHER events."""
        if table not in self.tables:
            return None
        fields = ["start", "end", self.column(table, "globalTid"), "nameId"]
        rows = self.ints(f"SELECT {', '.join(fields)} FROM {table}", len(fields), table)
        rows = rows[rows[:, 1] > rows[:, 0]]  # zero-length rows are markers ("profiling started")
        return self.host_block(Kind.OTHER, rows, self.names(rows[:, 3]))

    def nvtx_ranges(self) -> Block | None:
        """NVTX push/pop and start/end ranges as user annotations on the thread that opened them."""
        if NVTX not in self.tables:
            return None
        has_ids = "textId" in self.columns(NVTX) and "StringIds" in self.tables
        text = "coalesce(n.text, s.value, '')" if has_ids else "coalesce(n.text, '')"
        join = "LEFT JOIN StringIds AS s ON s.id = n.textId" if has_ids else ""
        domain = "coalesce(n.domainId, 0)" if "domainId" in self.columns(NVTX) else "0"
        sql = (f"SELECT n.start, coalesce(n.end, -1), coalesce(n.globalTid, -1), {domain}, {text} "
               f"FROM {NVTX} AS n {join} WHERE n.eventType IN ({', '.join(map(str, NVTX_RANGE_TYPES))})")
        fetched = self.db.execute(sql).fetchall()
        if not fetched:
            return None
        starts, ends, tids, domains, texts = zip(*fetched, strict=True)
        try:
            rows = np.array([starts, ends, tids, domains], dtype=np.int64).T
        except (TypeError, ValueError, OverflowError):
            raise StepscopeError(f"{self.path}: {NVTX} holds values that are not integers") from None
        name = np.fromiter(map(self.intern, texts), dtype=np.int32, count=len(texts))
        valid = (rows[:, 1] >= rows[:, 0]) | (rows[:, 1] < 0)  # negative: still open, closed at the trace end
        rows, name = rows[valid], name[valid]
        self.domain_note(rows, f"SELECT coalesce(n.globalTid, -1), {domain}, {text} FROM {NVTX} AS n {join} "
                               f"WHERE n.eventType = {NVTX_DOMAIN_CREATE}")
        return self.host_block(Kind.USER_ANNOTATION, rows, name)

    def domain_note(self, rows: np.ndarray, sql: str) -> None:
        """Say which NVTX domains the ranges came from; names stay plain so `--step-range NAME` matches."""
        in_domain = rows[:, 3] != 0
        if not in_domain.any():
            return
        names = {(_pid_of(g), int(d)): text for g, d, text in self.db.execute(sql)}
        counts = Counter(names.get((_pid_of(int(g)), int(d)), f"domain {int(d)}")
                         for g, d in rows[in_domain][:, 2:4].tolist())
        listed = ", ".join(f"{n} ({c})" for n, c in counts.most_common())
        self.notes.append(f"NVTX ranges from named domains: {listed}; "
                          "range names are shown without their domain")

    # -- metadata ----------------------------------------------------------------------------------
    def devices(self) -> list[DeviceInfo]:
        """CUDA devices from TARGET_INFO_CUDA_GPU (older exports) or TARGET_INFO_GPU (newer ones)."""
        old, new = "TARGET_INFO_CUDA_GPU", "TARGET_INFO_GPU"
        if old in self.tables:
            table, fields = old, [self.column(old, "deviceId", default="0"), "name",
                                  self.column(old, "globalMemorySize", default="0"),
                                  self.column(old, "numMultiprocessors", default="0"),
                                  self.column(old, "computeCapabilityMajor"),
                                  self.column(old, "computeCapabilityMinor"),
                                  self.column(old, "numThreadsPerWarp", default="0")]
        elif new in self.tables:
            table, fields = new, [self.column(new, "cuDevice", "id", "deviceId", default="0"), "name",
                                  self.column(new, "totalMemory", default="0"),
                                  self.column(new, "smCount", default="0"),
                                  self.column(new, "computeMajor"), self.column(new, "computeMinor"),
                                  self.column(new, "threadsPerWarp", default="0")]
        else:
            return []
        infos: dict[int, DeviceInfo] = {}
        described = table == old or "smCount" in self.columns(table)
        for device, name, memory, sms, major, minor, warp in self.db.execute(
                f"SELECT {', '.join(fields)} FROM {table}"):
            if described and not sms and (major or 0) <= 0:
                continue  # a display adapter that is not a CUDA device (integrated graphics, render driver)
            infos.setdefault(int(device), DeviceInfo(
                id=int(device), name=str(name or "unknown device"), kind="cuda",
                compute_capability=f"{major}.{minor}" if (major or 0) > 0 and minor is not None else None,
                total_memory_bytes=int(memory) or None, sm_count=int(sms) or None,
                warp_size=int(warp) or None,
            ))
        return sorted(infos.values(), key=lambda d: d.id)

    def thread_names(self, pids: np.ndarray, tids: np.ndarray,
                     ) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
        """Names of the processes and threads that have events."""
        threads = {(int(k) >> 24, int(k) & 0xFFFFFF) for k in np.unique((pids << 24) | tids)}
        processes = {p for p, _ in threads}
        thread_names: dict[tuple[int, int], str] = {}
        if "ThreadNames" in self.tables:
            rows = [(g, n) for g, n in self.db.execute("SELECT globalTid, nameId FROM ThreadNames")
                    if g is not None and (_pid_of(g), g & 0xFFFFFF) in threads]
            found = self.lookup({n for _, n in rows})
            thread_names = {(_pid_of(g), g & 0xFFFFFF): found[n] for g, n in rows if n in found}
        process_names: dict[int, str] = {}
        if "PROCESSES" in self.tables and {"pid", "name"} <= self.columns("PROCESSES"):
            process_names = {int(p): str(n) for p, n in self.db.execute("SELECT pid, name FROM PROCESSES")
                             if p in processes and n}
        for (pid, tid), name in thread_names.items():
            if pid == tid:  # the main thread carries the process's name when the export lists no processes
                process_names.setdefault(pid, name)
        return process_names, thread_names

    def session_start(self) -> int | None:
        """Wall-clock time of nsys's timestamp 0: event times count from the start of the session."""
        table = "TARGET_INFO_SESSION_START_TIME"
        if "utcEpochNs" not in self.columns(table):
            return None
        row = self.db.execute(f"SELECT utcEpochNs FROM {table}").fetchone()
        return int(row[0]) if row and isinstance(row[0], int) else None

    def sampling_note(self) -> None:
        if "COMPOSITE_EVENTS" in self.tables:
            (count,) = self.db.execute("SELECT count(*) FROM COMPOSITE_EVENTS").fetchone()
            if count:
                self.notes.append(f"{count} CPU samples (COMPOSITE_EVENTS) are in the export, not analysed")


def _first_of_duplicates(start: np.ndarray, end: np.ndarray, thread: np.ndarray, corr: np.ndarray,
                         name: np.ndarray) -> np.ndarray:
    """Row indices to keep: of calls with the same thread, correlation id and name, only the longest.

    Older exports write each CUDA API call twice, under its versioned and its plain name; the plain
    row encloses the versioned one. Calls without a correlation id are always kept.
    """
    linked = np.flatnonzero(corr >= 0)
    order = linked[np.lexsort((start[linked] - end[linked], name[linked], corr[linked], thread[linked]))]
    same = ((thread[order[1:]] == thread[order[:-1]]) & (corr[order[1:]] == corr[order[:-1]])
            & (name[order[1:]] == name[order[:-1]]))
    keep = np.ones(len(start), dtype=bool)
    keep[order[1:][same]] = False
    return np.flatnonzero(keep)


def _column(block: Block, name: str) -> np.ndarray:
    """A block's column, or the model's "absent" value where the table has none."""
    if name in block:
        return block[name]
    return np.full(len(block["start"]), 0 if name in ("copy_kind", "host_memory") else NONE,
                   dtype=np.int8 if name in ("copy_kind", "host_memory") else np.int64)


def _absent_if(values: np.ndarray, sentinel: int) -> np.ndarray:
    """The column with `sentinel` (how a packed NULL or CUPTI's invalid id reads) as NONE."""
    return np.where(values == sentinel, NONE, values)


def _pid_of(global_id: int) -> int:
    return (global_id >> 24) & 0xFFFFFF if global_id >= 0 else NONE


def _memory_label(symbol: str) -> str:
    return MEMORY_LABELS.get(symbol, symbol.replace("_", " ").title())
