"""The columnar trace model every reader produces and every analysis reads.

All times are integer nanoseconds from the trace's first event. One row per event; each column is a
read-only numpy array, so analyses are vectorised and nothing mutates shared tables.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from typing import TypeVar

import numpy as np

from stepscope.trace.growing import mapped_empty

T = TypeVar("T")

NONE = -1  # the "absent" value of every integer id column


class Kind(IntEnum):
    """What an event is, independent of the dialect that recorded it."""

    CPU_OP = 0  # an operator or autograd node on a host thread
    USER_ANNOTATION = 1  # record_function ranges, ProfilerStep#N, NVTX ranges
    PYTHON = 2  # a Python function frame (with_stack)
    RUNTIME = 3  # CUDA/HIP runtime or driver API call
    KERNEL = 4
    MEMCPY = 5
    MEMSET = 6
    GPU_ANNOTATION = 7  # a user annotation projected onto a GPU stream
    GPU_SYNC = 8  # a device-side synchronisation record (Kineto cuda_sync)
    OTHER = 9  # anything else that has a duration (profiler overhead, accelerator-specific events)


GPU_ACTIVITY_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)


class CopyKind(IntEnum):
    NONE = 0
    HTOD = 1
    DTOH = 2
    DTOD = 3
    HTOH = 4
    PTOP = 5
    OTHER = 6


class HostMemory(IntEnum):
    """The host side of a copy: pageable memory forces a staged, synchronous copy."""

    UNKNOWN = 0
    PAGEABLE = 1
    PINNED = 2


@dataclass(frozen=True)
class DeviceInfo:
    """A device the trace names: its id, name and what the trace says of its hardware."""

    id: int
    name: str
    kind: str  # "cuda" | "rocm" | "cpu" | "other"
    compute_capability: str | None = None
    total_memory_bytes: int | None = None
    sm_count: int | None = None
    warp_size: int | None = None


@dataclass(frozen=True)
class TraceMeta:
    """What a trace says of itself: its file, format, devices, rank and time origin, and the reader's notes."""

    path: str
    format: str  # "kineto" | "nsys" | "live"
    devices: tuple[DeviceInfo, ...] = ()
    rank: int | None = None
    world_size: int | None = None
    accelerator: str = "none"  # "cuda" | "rocm" | "other" | "none": what the device events come from
    start_epoch_ns: int | None = None  # wall-clock time of t=0 when the trace says
    origin_us: float = 0.0  # the source's own timestamp of t=0 (Kineto µs), to write tracks that line up
    process_names: dict[int, str] = field(default_factory=dict)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the reader had to assume, shown to the user
    # The profiler's settings as its own metadata names them ("record_shapes", "profile_memory", "with_stack", ...)
    profiler_settings: tuple[str, ...] = ()
    call_stack_ops: int = 0  # ops that carry a "Call stack" string (with_stack before torch's Python tracer)


def start_order(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The events table's order: by start, longer first at equal starts (an enclosing range before its children),
    then as given; what np.lexsort((-dur, start)) gives. A stable sort by start alone, which is near linear on
    the nearly sorted starts of a trace, then the few rows that share a start sorted among themselves."""
    order = np.argsort(start, kind="stable")
    tied = start[order]
    tied = np.flatnonzero(tied[1:] == tied[:-1])
    if len(tied):
        grouped = np.zeros(len(order), dtype=bool)
        grouped[tied] = grouped[tied + 1] = True
        at = np.flatnonzero(grouped)  # positions of each tie group, groups in start order
        rows = order[at]
        order[at] = rows[np.lexsort((rows, -dur[rows], start[rows]))]
    return order


def distinct(ids: np.ndarray) -> np.ndarray:
    """np.unique(ids) for an integer column, by a sort: numpy 2.3+ finds the distinct values of an array by hashing
    when nothing else is asked of it, which is several times slower than sorting a trace's ids (4 ms -> 0.4 ms on
    50k of them)."""
    out = np.sort(ids, axis=None)
    return out[np.concatenate(([True], out[1:] != out[:-1]))] if len(out) else out


def absent(column: str, value: object) -> bool:
    """Whether `value` is the events column's 'absent' value (what from_columns fills a column left out with)."""
    default = _DEFAULTS.get(column)
    if default is None:
        return False
    return bool(np.isnan(value)) if isinstance(default, float) and np.isnan(default) else bool(value == default)


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    array.flags.writeable = False
    return array


_EVENT_COLUMNS: dict[str, np.dtype] = {
    "kind": np.dtype(np.int8),
    "start": np.dtype(np.int64),
    "dur": np.dtype(np.int64),
    "pid": np.dtype(np.int64),
    "tid": np.dtype(np.int64),
    "device": np.dtype(np.int32),  # -1 for host events
    "stream": np.dtype(np.int64),  # -1 for host events
    "name": np.dtype(np.int32),  # index into Trace.strings
    "correlation": np.dtype(np.int64),
    "external_id": np.dtype(np.int64),
    "sequence": np.dtype(np.int64),  # autograd sequence number: links backward nodes to forward ops
    "fwd_tid": np.dtype(np.int64),
    "bytes": np.dtype(np.int64),
    "copy_kind": np.dtype(np.int8),
    "host_memory": np.dtype(np.int8),
    "flops": np.dtype(np.float64),  # NaN when unknown
    "stack": np.dtype(np.int32),  # python-stack id (index into Trace.stacks) or -1
    "inputs": np.dtype(np.int32),  # recorded input shapes (index into Trace.op_inputs) or -1
}

_DEFAULTS: dict[str, float | int] = {
    "device": NONE,
    "stream": NONE,
    "correlation": NONE,
    "external_id": NONE,
    "sequence": NONE,
    "fwd_tid": NONE,
    "bytes": NONE,
    "copy_kind": CopyKind.NONE,
    "host_memory": HostMemory.UNKNOWN,
    "flops": np.nan,
    "stack": NONE,
    "inputs": NONE,
}


@dataclass(frozen=True)
class OpInputs:
    """An op's inputs as the profiler records them with record_shapes: one entry per argument.

    dims: a tensor's sizes as a tuple of ints (() for a 0-d tensor and for non-tensors), a tensor list's as a
    tuple of such tuples; types: 'float', 'c10::BFloat16', 'Scalar', 'ScalarList', '' ...; concrete: the
    values of scalar and int-list arguments as strings ('[2, 2]', 'False', '1'), '' for tensors.
    """

    dims: tuple
    types: tuple[str, ...]
    concrete: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class Events:
    """The events table: one row per event, sorted by start time, every column read-only."""

    kind: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    name: np.ndarray
    correlation: np.ndarray
    external_id: np.ndarray
    sequence: np.ndarray
    fwd_tid: np.ndarray
    bytes: np.ndarray
    copy_kind: np.ndarray
    host_memory: np.ndarray
    flops: np.ndarray
    stack: np.ndarray
    inputs: np.ndarray

    @classmethod
    def from_columns(cls, **columns: np.ndarray) -> Events:
        """Build a sorted, read-only table; columns left out take their 'absent' value."""
        return cls.consume(columns)

    @classmethod
    def consume(cls, columns: dict[str, np.ndarray]) -> Events:
        """from_columns, emptying `columns` as it goes: each column given is let go once its sorted copy is made,
        so a reader that holds no other reference peaks at the table plus one column, not two tables. A column
        left out is its 'absent' value broadcast (read-only, no memory)."""
        n = len(columns["start"])
        start = np.asarray(columns["start"]).astype(np.int64, copy=False)
        dur = np.asarray(columns["dur"]).astype(np.int64, copy=False)
        # Stable sort by start; longer events first at equal starts so enclosing ranges precede children.
        ordered = bool(np.all((start[1:] > start[:-1]) | ((start[1:] == start[:-1]) & (dur[1:] <= dur[:-1]))))
        order = None if ordered else start_order(start, dur)
        del start, dur
        arrays: dict[str, np.ndarray] = {}
        for name, dtype in _EVENT_COLUMNS.items():
            if name in columns:
                array = np.asarray(columns.pop(name)).astype(dtype, copy=False)
                if len(array) != n:
                    raise ValueError(f"events column {name!r} has {len(array)} rows, expected {n}")
                arrays[name] = _frozen(array if order is None else array.take(order, axis=0))  # array[order], faster
                del array
            elif name in _DEFAULTS:
                arrays[name] = np.broadcast_to(np.array(_DEFAULTS[name], dtype=dtype), (n,))
            else:
                raise ValueError(f"events column {name!r} is required")
        return cls(**arrays)

    def __len__(self) -> int:
        return len(self.start)

    @cached_property
    def end(self) -> np.ndarray:
        # Kept as long as the table: mapped, out of the heap.
        return _frozen(np.add(self.start, self.dur, out=mapped_empty(len(self.start), np.int64)))

    def of_kind(self, *kinds: Kind) -> np.ndarray:
        """Boolean mask of the rows whose kind is one of `kinds`."""
        mask = self.kind == kinds[0]
        for kind in kinds[1:]:  # a comparison per kind: several times faster than np.isin on int8 codes
            mask |= self.kind == kind
        return mask


@dataclass(frozen=True, eq=False)
class MemoryEvents:
    """Allocator samples ([memory] instant events): one row per allocation or free."""

    time: np.ndarray  # int64 ns
    device: np.ndarray  # int32, -1 for host memory
    bytes: np.ndarray  # int64, negative for a free
    total_allocated: np.ndarray  # int64, -1 when unknown
    total_reserved: np.ndarray  # int64, -1 when unknown
    addr: np.ndarray  # int64 block address (pairs an allocation with its free), -1 when unknown
    pid: np.ndarray  # int64 process and thread that allocated, -1 when unknown
    tid: np.ndarray

    @classmethod
    def empty(cls) -> MemoryEvents:
        return cls.from_columns(time=[], device=[], bytes=[], total_allocated=[], total_reserved=[])

    @classmethod
    def from_columns(cls, **columns: np.ndarray | list) -> MemoryEvents:
        time = np.asarray(columns["time"], dtype=np.int64)
        order = np.argsort(time, kind="stable")
        dtypes = {"time": np.int64, "device": np.int32, "bytes": np.int64,
                  "total_allocated": np.int64, "total_reserved": np.int64}
        arrays = {k: _frozen(np.asarray(columns[k], dtype=dt)[order]) for k, dt in dtypes.items()}
        for optional in ("addr", "pid", "tid"):  # older readers and formats do not give them
            given = columns.get(optional)
            values = np.full(len(time), NONE, np.int64) if given is None else np.asarray(given, dtype=np.int64)
            arrays[optional] = _frozen(values[order])
        return cls(**arrays)

    def __len__(self) -> int:
        return len(self.time)


@dataclass(frozen=True, eq=False)
class Trace:
    """A whole trace: metadata, the events table and its string table."""

    meta: TraceMeta
    events: Events
    strings: tuple[str, ...]
    memory: MemoryEvents = field(default_factory=MemoryEvents.empty)
    stacks: tuple[tuple[int, ...], ...] = ()  # python stacks as tuples of string ids, innermost last
    op_inputs: tuple[OpInputs, ...] = ()  # distinct recorded input shapes, indexed by the events' `inputs`

    def inputs_of(self, row: int) -> OpInputs | None:
        """The recorded inputs of an op (record_shapes), or None."""
        index = int(self.events.inputs[row])
        return self.op_inputs[index] if index >= 0 else None

    def name_of(self, row: int) -> str:
        return self.strings[int(self.events.name[row])]

    def names_where(self, predicate: Callable[[str], bool]) -> np.ndarray:
        """Row mask of events whose name satisfies `predicate`, evaluated once per distinct name."""
        table = np.fromiter(map(predicate, self.strings), dtype=bool, count=len(self.strings))
        if len(table) == 0:
            return np.zeros(len(self.events), dtype=bool)
        return table.take(self.events.name)  # table[name], twice as fast

    @cached_property
    def is_gpu_activity(self) -> np.ndarray:
        return self.events.of_kind(*GPU_ACTIVITY_KINDS)

    def derived(self, key: Hashable, compute: Callable[[], T]) -> T:
        """An index computed from this trace once and kept with it (host thread numbers, launch links,
        category masks, the source map): analyses ask through here, so nothing outlives the trace and
        no module keeps a cache of traces."""
        memo = self.__dict__.setdefault("_derived", {})  # frozen dataclass: write past __setattr__
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    @property
    def has_device_events(self) -> bool:
        return bool(self.is_gpu_activity.any())

    @property
    def platform(self) -> str:
        """What ran the steps, as the analyses read them: "gpu" (a CUDA or ROCm device timeline is in the
        trace), "other" (a non-GPU accelerator: only its host side is read) or "cpu" (no device timeline).
        The one "is this a GPU run" test: advice, the report's device list and the timeline all ask it."""
        if self.meta.accelerator == "other":
            return "other"
        return "gpu" if self.has_device_events and self.meta.accelerator != "none" else "cpu"
