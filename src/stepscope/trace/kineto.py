"""Reader for PyTorch profiler (Kineto) Chrome-trace JSON: .json, .json.gz, every dialect in the wild.

Memory is the constraint on big traces, so decoding happens in two passes: first the event list as raw
JSON slices (views into the buffer), then batches of slices into typed structs that are turned into
numpy columns and dropped before the next batch. Only one batch of Python objects is alive at a time.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Union

import msgspec
import numpy as np

from stepscope.errors import StepscopeError
from stepscope.trace.files import read_bytes
from stepscope.trace.kineto_dialect import (
    CATEGORY_KIND,
    MEMORY_EVENT_NAME,
    OTHER_ACCELERATOR_DEVICE_CATEGORIES,
    OTHER_ACCELERATOR_RUNTIME_CATEGORIES,
    SKIPPED_CATEGORIES,
    accelerator_of,
    parse_memcpy_name,
)
from stepscope.trace.kineto_inputs import InputsInterner
from stepscope.trace.model import NONE, DeviceInfo, Events, Kind, MemoryEvents, Trace, TraceMeta
from stepscope.trace.source_annotations import OWN_ANNOTATION_PREFIX

Scalar = int | float | str | None
BATCH = 16_384  # events decoded to Python objects at once


class _Args(msgspec.Struct, gc=False):
    """The span args stepscope reads; every other arg is skipped by the decoder, never built."""

    external_id: Scalar = msgspec.field(default=None, name="External id")
    external_id_old: Scalar = msgspec.field(default=None, name="external id")
    correlation: Scalar = None
    sequence: Scalar = msgspec.field(default=None, name="Sequence number")
    fwd_tid: Scalar = msgspec.field(default=None, name="Fwd thread id")
    device: Scalar = None
    stream: Scalar = None
    bytes: Scalar = None
    flops: Scalar = None
    # record_shapes: kept raw and interned (kineto_inputs), decoded once per distinct signature
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")  # empty when absent
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Concrete Inputs")


class _MemoryArgs(msgspec.Struct, gc=False):
    mem_bytes: Scalar = msgspec.field(default=None, name="Bytes")
    total_allocated: Scalar = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Scalar = msgspec.field(default=None, name="Total Reserved")
    device_type: Scalar = msgspec.field(default=None, name="Device Type")
    device_id: Scalar = msgspec.field(default=None, name="Device Id")
    addr: Scalar = msgspec.field(default=None, name="Addr")


class _NameArgs(msgspec.Struct, gc=False):
    name: Scalar = None


# A tagged union on "ph": spans decode fully, flows and counters decode to empty structs.
class _Span(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    cat: str | None = None
    name: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
    ts: float | None = None  # a string here sends the batch down the lenient path, which converts it
    dur: float | None = None
    args: _Args | None = None


class _Instant(msgspec.Struct, tag_field="ph", tag="i", gc=False):
    name: Scalar = None
    ts: float | None = None
    pid: Scalar = None
    tid: Scalar = None
    args: _MemoryArgs | None = None


class _InstantUpper(_Instant, tag="I"):
    pass


class _Metadata(msgspec.Struct, tag_field="ph", tag="M", gc=False):
    name: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
    args: _NameArgs | None = None


_IGNORED_PHASES = "BEbneCstfPNODVvRc()"
_Ignored = tuple(
    msgspec.defstruct(f"_Ignored{i}", [], tag_field="ph", tag=ph, gc=False) for i, ph in enumerate(_IGNORED_PHASES)
)
_AnyEvent = Union[(_Span, _Instant, _InstantUpper, _Metadata, *_Ignored)]


class _DeviceProperties(msgspec.Struct, gc=False):
    id: Scalar = None
    name: Scalar = None
    totalGlobalMem: Scalar = None
    computeMajor: Scalar = None
    computeMinor: Scalar = None
    numSms: Scalar = None
    warpSize: Scalar = None


class _TraceFile(msgspec.Struct, gc=False):
    traceEvents: list[msgspec.Raw] | None = None
    deviceProperties: list[_DeviceProperties] | None = None
    distributedInfo: dict | None = None
    baseTimeNanoseconds: Scalar = None
    nodes: msgspec.Raw | None = None  # a PyTorch execution trace, not a profiler trace


_FILE_DECODER = msgspec.json.Decoder(_TraceFile)
_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_BATCH_DECODER = msgspec.json.Decoder(list[_AnyEvent])  # type: ignore[valid-type]
_PID, _TID, _TS, _DUR = attrgetter("pid"), attrgetter("tid"), attrgetter("ts"), attrgetter("dur")
_DEVICE, _STREAM, _BYTES, _FLOPS = attrgetter("device"), attrgetter("stream"), attrgetter("bytes"), attrgetter("flops")
_CORRELATION, _SEQUENCE, _FWD_TID = attrgetter("correlation"), attrgetter("sequence"), attrgetter("fwd_tid")


def _as_int(value: Scalar, default: int = NONE) -> int:
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value == value and abs(value) < 9e18 else default
    try:
        return int(value, 0)  # HIP writes streams as "0x0"
    except (ValueError, TypeError):
        return default


def _as_float(value: Scalar) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (ValueError, TypeError):
        return None


def _int_column(values: list[Scalar], default: int = NONE) -> np.ndarray:
    """Column of ints; None becomes `default`. Falls back to per-value parsing for odd types ("0x0").

    Going through float64 lets numpy turn None into NaN in C; ids and byte counts stay exact below 2**53.
    """
    try:
        floats = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([_as_int(v, default) for v in values], dtype=np.int64)
    missing = np.isnan(floats)
    if missing.any():
        floats[missing] = default
    return floats.astype(np.int64)


def _float_column(values: list[Scalar]) -> np.ndarray:
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([np.nan if (f := _as_float(v)) is None else f for v in values], dtype=np.float64)


def read_kineto(path: str | Path) -> Trace:
    """Read one Kineto trace file into the columnar model."""
    path = Path(path)
    data = read_bytes(path)
    # Hundreds of thousands of small objects are made and none is cyclic: the collector only costs time.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        parsed = _decode_outline(data, path)
        if parsed.traceEvents is None:
            raise _not_a_trace(parsed, path)
        builder = _ColumnBuilder()
        events = parsed.traceEvents
        parsed.traceEvents = None
        for lo in range(0, len(events), BATCH):
            builder.add(_decode_batch(events[lo : lo + BATCH]))
        del events, data
        return builder.finish(parsed, path)
    finally:
        if gc_was_enabled:
            gc.enable()


def _decode_outline(data: bytes | bytearray, path: Path) -> _TraceFile:
    start = bytes(data[:4096]).lstrip()[:1]
    if start not in (b"{", b"["):
        raise StepscopeError(f"{path}: not JSON (a PyTorch profiler trace is a JSON object with traceEvents)")
    try:
        if start == b"[":
            return _TraceFile(traceEvents=_LIST_DECODER.decode(data))
        return _FILE_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        return _outline_leniently(data, path, exc)
    except msgspec.DecodeError as exc:
        raise StepscopeError(f"{path}: invalid JSON ({exc})") from None


def _outline_leniently(data: bytes | bytearray, path: Path, error: Exception) -> _TraceFile:
    """The file's top level has unexpected types: keep what still makes sense."""
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise StepscopeError(f"{path}: invalid JSON ({exc})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("traceEvents"), list):
        raise StepscopeError(f"{path}: not a PyTorch profiler trace ({error})")
    encode = msgspec.json.encode
    devices = []
    for item in raw.get("deviceProperties") or []:
        try:
            devices.append(msgspec.convert(item, _DeviceProperties, strict=False))
        except (msgspec.ValidationError, TypeError):
            continue
    info = raw.get("distributedInfo")
    return _TraceFile(
        traceEvents=[msgspec.Raw(encode(e)) for e in raw["traceEvents"]],
        deviceProperties=devices,
        distributedInfo=info if isinstance(info, dict) else None,
    )


def _decode_batch(raws: list[msgspec.Raw]) -> list:
    """Typed decode of a batch; on a type surprise, decode event by event and keep the ones that convert."""
    joined = b"[" + b",".join(raws) + b"]"
    try:
        return _BATCH_DECODER.decode(joined)
    except msgspec.ValidationError:
        pass
    events = []
    for raw in raws:
        try:
            events.append(msgspec.convert(msgspec.json.decode(raw), _AnyEvent, strict=False))
        except (msgspec.ValidationError, msgspec.DecodeError, TypeError):
            continue
    return events


def _not_a_trace(parsed: _TraceFile, path: Path) -> StepscopeError:
    if parsed.nodes is not None:
        return StepscopeError(
            f"{path}: this is a PyTorch execution trace (nodes, no traceEvents), not a profiler trace",
            hint="record with torch.profiler.profile(...) and export_chrome_trace, or use `stepscope run`",
        )
    return StepscopeError(f"{path}: not a PyTorch profiler trace (no traceEvents list)")


@dataclass
class _ColumnBuilder:
    """Accumulates numpy columns batch by batch; names are interned across batches."""

    columns: dict[str, list[np.ndarray]] = field(default_factory=dict)
    names: dict[Scalar, int] = field(default_factory=dict)
    categories: set[str | None] = field(default_factory=set)
    kind_of: dict[str | None, tuple[int, bool]] = field(default_factory=dict)
    memory: dict[str, list[np.ndarray]] = field(default_factory=dict)
    process_names: dict[int, str] = field(default_factory=dict)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    inputs: InputsInterner = field(default_factory=InputsInterner)

    def _kind(self, cat: str | None) -> tuple[int, bool]:
        """(kind, on a device) for a category, decided once per distinct category."""
        if cat not in self.kind_of:
            kind = CATEGORY_KIND.get(cat) if cat is not None else None
            if kind is None:
                kind = Kind.RUNTIME if cat in OTHER_ACCELERATOR_RUNTIME_CATEGORIES else Kind.OTHER
            on_device = kind >= Kind.KERNEL or cat in OTHER_ACCELERATOR_DEVICE_CATEGORIES
            self.kind_of[cat] = (int(kind), bool(on_device))
            self.categories.add(cat)
        return self.kind_of[cat]

    def _append(self, **arrays: np.ndarray) -> None:
        for key, array in arrays.items():
            self.columns.setdefault(key, []).append(array)

    def add(self, events: list) -> None:
        spans = [
            ev for ev in events
            if type(ev) is _Span and ev.dur is not None and ev.ts is not None and ev.dur >= 0
            and ev.cat not in SKIPPED_CATEGORIES
        ]
        for ev in events:
            if type(ev) is _Metadata:
                self._metadata(ev)
        memory = [ev for ev in events if (type(ev) is _Instant or type(ev) is _InstantUpper)
                  and ev.name == MEMORY_EVENT_NAME and ev.args is not None and ev.ts is not None]
        if memory:
            self._add_memory(memory)
        if not spans:
            return
        cats = [ev.cat for ev in spans]
        for cat in set(cats):
            self._kind(cat)
        kind = np.fromiter((self.kind_of[c][0] for c in cats), dtype=np.int8, count=len(cats))
        on_device = np.fromiter((self.kind_of[c][1] for c in cats), dtype=bool, count=len(cats))
        # Intern names: str caches its hash, so the second lookup of each name is cheap.
        names = [ev.name for ev in spans]
        for name in dict.fromkeys(names):
            if name not in self.names:
                self.names[name] = len(self.names)
        name_ids = np.fromiter(map(self.names.__getitem__, names), dtype=np.int32, count=len(names))
        no_args = _Args()
        args = [ev.args or no_args for ev in spans]
        pid = _int_column(list(map(_PID, spans)))
        tid = _int_column(list(map(_TID, spans)))
        # Device events carry device and stream in args; old traces only as pid and tid.
        arg_device = _int_column(list(map(_DEVICE, args)))
        arg_stream = _int_column(list(map(_STREAM, args)))
        external = _int_column([a.external_id if a.external_id is not None else a.external_id_old for a in args])
        self._append(
            kind=kind, pid=pid, tid=tid, name=name_ids, external_id=external,
            device=np.where(on_device, np.where(arg_device >= 0, arg_device, pid), NONE),
            stream=np.where(on_device, np.where(arg_stream >= 0, arg_stream, tid), NONE),
            ts=np.array(list(map(_TS, spans)), dtype=np.float64),
            dur=np.array(list(map(_DUR, spans)), dtype=np.float64),
            correlation=_int_column(list(map(_CORRELATION, args))),
            sequence=_int_column(list(map(_SEQUENCE, args))),
            fwd_tid=_int_column(list(map(_FWD_TID, args))),
            bytes=_int_column(list(map(_BYTES, args))),
            flops=_float_column(list(map(_FLOPS, args))),
            inputs=self._inputs(args),
        )

    def _inputs(self, args: list[_Args]) -> np.ndarray:
        """Each span's recorded inputs (record_shapes) as an index into the interned table, else -1."""
        if not any(a.input_dims for a in args):
            return np.full(len(args), NONE, dtype=np.int32)
        intern = self.inputs.intern
        return np.fromiter((intern(a.input_dims, a.input_type, a.concrete) for a in args), np.int32, len(args))

    def _add_memory(self, events: list[_Instant]) -> None:
        """Allocator samples ([memory] instants) as columns; device -1 is host memory."""
        args = [ev.args for ev in events]
        device_type = _int_column([a.device_type for a in args], 0)  # type: ignore[union-attr]
        device_id = _int_column([a.device_id for a in args])  # type: ignore[union-attr]
        columns = {
            "ts": np.array([ev.ts for ev in events], dtype=np.float64),
            "device": np.where(device_type != 0, device_id, NONE),
            "bytes": _int_column([a.mem_bytes for a in args], 0),  # type: ignore[union-attr]
            "total_allocated": _int_column([a.total_allocated for a in args]),  # type: ignore[union-attr]
            "total_reserved": _int_column([a.total_reserved for a in args]),  # type: ignore[union-attr]
            "addr": _int_column([a.addr for a in args]),  # type: ignore[union-attr]
            "pid": _int_column([ev.pid for ev in events]),
            "tid": _int_column([ev.tid for ev in events]),
        }
        for key, array in columns.items():
            self.memory.setdefault(key, []).append(array)

    def _metadata(self, ev: _Metadata) -> None:
        if ev.args is None or not isinstance(ev.args.name, str):
            return
        if ev.name == "process_name":
            self.process_names[_as_int(ev.pid)] = ev.args.name
        elif ev.name == "thread_name":
            self.thread_names[(_as_int(ev.pid), _as_int(ev.tid))] = ev.args.name

    def finish(self, parsed: _TraceFile, path: Path) -> Trace:
        if not self.columns and not self.memory:
            raise StepscopeError(f"{path}: the trace has no events with a duration (nothing to analyse)")
        cols = {k: np.concatenate(v) for k, v in self.columns.items()}
        self.columns.clear()
        mem = {k: np.concatenate(v) for k, v in self.memory.items()}
        mem_ts = mem.pop("ts", np.zeros(0))
        ts_us = cols.pop("ts", np.zeros(0))
        t0 = float(min(ts_us.min() if len(ts_us) else np.inf, mem_ts.min() if len(mem_ts) else np.inf))
        # Subtract the origin in µs before scaling: epoch-sized µs floats keep their fraction that way.
        start = np.rint((ts_us - t0) * 1000.0).astype(np.int64)
        dur = np.rint(cols.pop("dur", np.zeros(0)) * 1000.0).astype(np.int64)
        strings = tuple(n if isinstance(n, str) else str(n) for n in self.names)
        kind = cols.get("kind", np.zeros(0, np.int8))
        name = cols.get("name", np.zeros(0, np.int32))
        if "kind" in cols:
            cols["kind"] = kind = _own_annotations_as_annotations(kind, name, strings)
        copy_kind, host_memory = _copy_columns(kind, name, strings)
        if not cols:
            cols = {k: np.zeros(0, np.int64) for k in ("kind", "pid", "tid", "name")}
        table = Events.from_columns(start=start, dur=dur, copy_kind=copy_kind, host_memory=host_memory, **cols)
        empty = np.zeros(0, np.int64)
        memory = MemoryEvents.from_columns(
            time=np.rint((mem_ts - t0) * 1000.0).astype(np.int64),
            device=mem.get("device", empty), bytes=mem.get("bytes", empty),
            total_allocated=mem.get("total_allocated", empty), total_reserved=mem.get("total_reserved", empty),
            addr=mem.get("addr"), pid=mem.get("pid"), tid=mem.get("tid"),
        )
        return Trace(meta=self._meta(parsed, path, table, strings, t0), events=table, strings=strings, memory=memory,
                     op_inputs=self.inputs.table())

    def _meta(self, parsed: _TraceFile, path: Path, table: Events, strings: tuple[str, ...], t0: float) -> TraceMeta:
        runtime_names = {strings[i] for i in np.unique(table.name[table.kind == Kind.RUNTIME])}
        device_names = [str(p.name) for p in parsed.deviceProperties or [] if p.name]
        categories = {c for c in self.categories if c}
        accelerator = accelerator_of(device_names, runtime_names, categories)
        if accelerator == "none" and table.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET).any():
            accelerator = "cuda"
        info = parsed.distributedInfo or {}
        rank, world = info.get("rank"), info.get("world_size")
        base = _as_int(parsed.baseTimeNanoseconds, 0)
        notes = []
        if not parsed.deviceProperties and accelerator in ("cuda", "rocm"):
            notes.append("the trace has no deviceProperties: device name and limits are unknown")
        devices = _device_infos(parsed.deviceProperties, accelerator)
        if accelerator == "other":
            family = sorted(c.split("_")[0].upper() for c in categories if c.split("_")[0] != "cpu")
            devices = devices or [DeviceInfo(id=0, name=f"{family[0] if family else 'unknown'} accelerator",
                                             kind="other")]
            notes.append("device events come from a non-GPU accelerator: GPU analyses do not apply")
        return TraceMeta(
            path=str(path),
            format="kineto",
            devices=tuple(devices),
            rank=rank if isinstance(rank, int) else None,
            world_size=world if isinstance(world, int) else None,
            accelerator=accelerator,
            start_epoch_ns=int(base + t0 * 1000) if base or t0 > 1e14 else None,
            origin_us=t0,
            process_names=self.process_names,
            thread_names=self.thread_names,
            notes=tuple(notes),
        )


def _device_infos(props: list[_DeviceProperties] | None, accelerator: str) -> list[DeviceInfo]:
    infos = []
    for p in props or []:
        major, minor = _as_int(p.computeMajor), _as_int(p.computeMinor)
        infos.append(
            DeviceInfo(
                id=_as_int(p.id, len(infos)),
                name=str(p.name or "unknown device"),
                kind=accelerator if accelerator in ("cuda", "rocm") else "other",
                compute_capability=f"{major}.{minor}" if major >= 0 and minor >= 0 else None,
                total_memory_bytes=_as_int(p.totalGlobalMem, 0) or None,
                sm_count=_as_int(p.numSms, 0) or None,
                warp_size=_as_int(p.warpSize, 0) or None,
            )
        )
    return infos


def _own_annotations_as_annotations(kind: np.ndarray, name: np.ndarray, strings: tuple[str, ...]) -> np.ndarray:
    """stepscope's source ranges are recorded as ops (the fast record_function API); they are annotations."""
    own = np.fromiter((s.startswith(OWN_ANNOTATION_PREFIX) for s in strings), dtype=bool, count=len(strings))
    if not own.any():
        return kind
    return np.where(own[name] & (kind == Kind.CPU_OP), np.int8(Kind.USER_ANNOTATION), kind).astype(np.int8)


def _copy_columns(kind: np.ndarray, name: np.ndarray, strings: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Copy direction and host memory type, parsed once per distinct memcpy name."""
    copy_kind = np.zeros(len(kind), dtype=np.int8)
    host_memory = np.zeros(len(kind), dtype=np.int8)
    rows = np.flatnonzero(kind == Kind.MEMCPY)
    if len(rows):
        lut_kind = np.zeros(len(strings), dtype=np.int8)
        lut_memory = np.zeros(len(strings), dtype=np.int8)
        for i in np.unique(name[rows]):
            lut_kind[i], lut_memory[i] = parse_memcpy_name(strings[i])
        copy_kind[rows] = lut_kind[name[rows]]
        host_memory[rows] = lut_memory[name[rows]]
    return copy_kind, host_memory
