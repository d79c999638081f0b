"""Reader for PyTorch profiler (Kineto) Chrome-trace JSON: .json, .json.gz, every dialect in the wild."""

from __future__ import annotations

import gc
from operator import attrgetter
from pathlib import Path

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
from stepscope.trace.model import NONE, DeviceInfo, Events, Kind, MemoryEvents, Trace, TraceMeta

Scalar = int | float | str | None


class _Args(msgspec.Struct, gc=False):
    """The event args stepscope reads; every other arg is skipped by the decoder, never built."""

    external_id: Scalar = msgspec.field(default=None, name="External id")
    external_id_old: Scalar = msgspec.field(default=None, name="external id")
    correlation: Scalar = None
    sequence: Scalar = msgspec.field(default=None, name="Sequence number")
    fwd_tid: Scalar = msgspec.field(default=None, name="Fwd thread id")
    device: Scalar = None
    stream: Scalar = None
    bytes: Scalar = None
    flops: Scalar = None
    name: Scalar = None  # metadata events: process and thread names
    mem_bytes: Scalar = msgspec.field(default=None, name="Bytes")
    total_allocated: Scalar = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Scalar = msgspec.field(default=None, name="Total Reserved")
    device_type: Scalar = msgspec.field(default=None, name="Device Type")
    device_id: Scalar = msgspec.field(default=None, name="Device Id")


class _Event(msgspec.Struct, gc=False):
    ph: str | None = None
    cat: str | None = None
    name: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
    ts: float | None = None  # a string here sends the file down the lenient path, which converts it
    dur: float | None = None
    args: _Args | None = None


class _DeviceProperties(msgspec.Struct, gc=False):
    id: Scalar = None
    name: Scalar = None
    totalGlobalMem: Scalar = None
    computeMajor: Scalar = None
    computeMinor: Scalar = None
    numSms: Scalar = None
    warpSize: Scalar = None


class _TraceFile(msgspec.Struct, gc=False):
    traceEvents: list[_Event] | None = None
    deviceProperties: list[_DeviceProperties] | None = None
    distributedInfo: dict | None = None
    baseTimeNanoseconds: Scalar = None
    # Markers of JSON that is not a Chrome trace, to say what it is instead.
    nodes: list[msgspec.Raw] | None = None
    schema: Scalar = None


_FILE_DECODER = msgspec.json.Decoder(_TraceFile)
_PID, _TID, _TS, _DUR = attrgetter("pid"), attrgetter("tid"), attrgetter("ts"), attrgetter("dur")
_DEVICE, _STREAM, _BYTES, _FLOPS = attrgetter("device"), attrgetter("stream"), attrgetter("bytes"), attrgetter("flops")
_CORRELATION, _SEQUENCE, _FWD_TID = attrgetter("correlation"), attrgetter("sequence"), attrgetter("fwd_tid")
_LIST_DECODER = msgspec.json.Decoder(list[_Event])


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
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except ValueError:
        return None


def _first_byte(data: bytes) -> bytes:
    """The first non-whitespace byte, without copying a large buffer."""
    head = data[:4096].lstrip()
    return head[:1]


def _decode(data: bytes, path: Path) -> _TraceFile:
    start = _first_byte(data)
    if start not in (b"{", b"["):
        raise StepscopeError(f"{path}: not JSON (a PyTorch profiler trace is a JSON object with traceEvents)")
    try:
        if start == b"[":
            return _TraceFile(traceEvents=_LIST_DECODER.decode(data))
        return _FILE_DECODER.decode(data)
    except msgspec.ValidationError:
        return _decode_leniently(data, path)
    except msgspec.DecodeError as exc:
        raise StepscopeError(f"{path}: invalid JSON ({exc})") from None


def _decode_leniently(data: bytes, path: Path) -> _TraceFile:
    """Slow path for traces whose fields have unexpected types: keep every event that still makes sense."""
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise StepscopeError(f"{path}: invalid JSON ({exc})") from None
    if isinstance(raw, list):
        raw = {"traceEvents": raw}
    if not isinstance(raw, dict):
        raise StepscopeError(f"{path}: not a PyTorch profiler trace (top-level JSON is not an object)")
    events: list[_Event] = []
    for item in raw.get("traceEvents") or []:
        try:
            events.append(msgspec.convert(item, _Event, strict=False))
        except (msgspec.ValidationError, TypeError):
            continue
    devices: list[_DeviceProperties] = []
    for item in raw.get("deviceProperties") or []:
        try:
            devices.append(msgspec.convert(item, _DeviceProperties, strict=False))
        except (msgspec.ValidationError, TypeError):
            continue
    info = raw.get("distributedInfo")
    return _TraceFile(
        traceEvents=events if "traceEvents" in raw else None,
        deviceProperties=devices,
        distributedInfo=info if isinstance(info, dict) else None,
        nodes=[] if "nodes" in raw else None,
    )


def _not_a_trace(parsed: _TraceFile, path: Path) -> StepscopeError:
    if parsed.nodes is not None:
        return StepscopeError(
            f"{path}: this is a PyTorch execution trace (nodes, no traceEvents), not a profiler trace",
            hint="record with torch.profiler.profile(...) and export_chrome_trace, or use `stepscope run`",
        )
    return StepscopeError(f"{path}: not a PyTorch profiler trace (no traceEvents list)")


def read_kineto(path: str | Path) -> Trace:
    """Read one Kineto trace file into the columnar model."""
    path = Path(path)
    data = read_bytes(path)
    # Hundreds of thousands of small objects are made and none is cyclic: the collector only costs time.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        parsed = _decode(data, path)
        del data
        if parsed.traceEvents is None:
            raise _not_a_trace(parsed, path)
        return _build(parsed, path)
    finally:
        if gc_was_enabled:
            gc.enable()


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


def _metadata(events: list[_Event]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    process_names: dict[int, str] = {}
    thread_names: dict[tuple[int, int], str] = {}
    for ev in events:
        if ev.ph == "M" and ev.args is not None and isinstance(ev.args.name, str):
            if ev.name == "process_name":
                process_names[_as_int(ev.pid)] = ev.args.name
            elif ev.name == "thread_name":
                thread_names[(_as_int(ev.pid), _as_int(ev.tid))] = ev.args.name
    return process_names, thread_names


def _build(parsed: _TraceFile, path: Path) -> Trace:
    events = parsed.traceEvents or []
    no_args = _Args()
    spans = [
        ev for ev in events
        if ev.ph == "X" and ev.dur is not None and ev.ts is not None and ev.dur >= 0
        and ev.cat not in SKIPPED_CATEGORIES
    ]
    memory_events = [ev for ev in events if ev.name == MEMORY_EVENT_NAME and ev.ph in ("i", "I")
                     and ev.args is not None and ev.ts is not None]
    process_names, thread_names = _metadata(events)
    if not spans and not memory_events:
        raise StepscopeError(f"{path}: the trace has no events with a duration (nothing to analyse)")

    # Kind per event, decided once per distinct category.
    categories = {ev.cat for ev in spans}
    kind_of: dict[str | None, int] = {}
    on_device_of: dict[str | None, bool] = {}
    for cat in categories:
        kind = CATEGORY_KIND.get(cat) if cat is not None else None
        if kind is None:
            kind = Kind.RUNTIME if cat in OTHER_ACCELERATOR_RUNTIME_CATEGORIES else Kind.OTHER
        kind_of[cat] = int(kind)
        on_device_of[cat] = kind >= Kind.KERNEL or cat in OTHER_ACCELERATOR_DEVICE_CATEGORIES
    kind_arr = np.array([kind_of[ev.cat] for ev in spans], dtype=np.int8)
    on_device = np.array([on_device_of[ev.cat] for ev in spans], dtype=bool)

    # Intern names: str caches its hash, so the second lookup of each name is cheap.
    names = [ev.name for ev in spans]
    index = {name: i for i, name in enumerate(dict.fromkeys(names))}
    name_arr = np.fromiter(map(index.__getitem__, names), dtype=np.int32, count=len(names))
    string_table = tuple(n if isinstance(n, str) else str(n) for n in index)
    del names, index

    args = [ev.args or no_args for ev in spans]
    pid = _int_column(list(map(_PID, spans)))
    tid = _int_column(list(map(_TID, spans)))
    arg_device = _int_column(list(map(_DEVICE, args)))
    arg_stream = _int_column(list(map(_STREAM, args)))
    # Device events carry device and stream in args; old traces only as pid and tid.
    device = np.where(on_device, np.where(arg_device >= 0, arg_device, pid), NONE)
    stream = np.where(on_device, np.where(arg_stream >= 0, arg_stream, tid), NONE)
    external = _int_column([a.external_id if a.external_id is not None else a.external_id_old for a in args])

    ts_us = np.array(list(map(_TS, spans)), dtype=np.float64)
    mem_ts = np.array([ev.ts for ev in memory_events], dtype=np.float64)
    t0 = float(min(ts_us.min() if len(ts_us) else np.inf, mem_ts.min() if len(mem_ts) else np.inf))
    # Subtract the origin in µs before scaling: epoch-sized µs floats keep their fraction that way.
    start = np.rint((ts_us - t0) * 1000.0).astype(np.int64)
    dur = np.rint(np.array(list(map(_DUR, spans)), dtype=np.float64) * 1000.0).astype(np.int64)

    copy_kind, host_memory = _copy_columns(kind_arr, name_arr, string_table)
    table = Events.from_columns(
        kind=kind_arr, start=start, dur=dur, pid=pid, tid=tid, device=device, stream=stream,
        name=name_arr, correlation=_int_column(list(map(_CORRELATION, args))), external_id=external,
        sequence=_int_column(list(map(_SEQUENCE, args))), fwd_tid=_int_column(list(map(_FWD_TID, args))),
        bytes=_int_column(list(map(_BYTES, args))), copy_kind=copy_kind, host_memory=host_memory,
        flops=_float_column(list(map(_FLOPS, args))),
    )
    del spans, args

    margs = [ev.args for ev in memory_events]
    device_type = _int_column([a.device_type for a in margs], 0)  # type: ignore[union-attr]
    memory = MemoryEvents.from_columns(
        time=np.rint((mem_ts - t0) * 1000.0).astype(np.int64),
        device=np.where(device_type != 0, _int_column([a.device_id for a in margs]), NONE),  # type: ignore[union-attr]
        bytes=_int_column([a.mem_bytes for a in margs], 0),  # type: ignore[union-attr]
        total_allocated=_int_column([a.total_allocated for a in margs]),  # type: ignore[union-attr]
        total_reserved=_int_column([a.total_reserved for a in margs]),  # type: ignore[union-attr]
    )

    runtime_names = {string_table[i] for i in np.unique(name_arr[kind_arr == Kind.RUNTIME])}
    device_names = [str(p.name) for p in parsed.deviceProperties or [] if p.name]
    accelerator = accelerator_of(device_names, runtime_names, {c for c in categories if c})
    if accelerator == "none" and np.isin(kind_arr, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)).any():
        accelerator = "cuda"
    info = parsed.distributedInfo or {}
    rank, world = info.get("rank"), info.get("world_size")
    base = _as_int(parsed.baseTimeNanoseconds, 0)
    notes = []
    if not parsed.deviceProperties and accelerator in ("cuda", "rocm"):
        notes.append("the trace has no deviceProperties: device name and limits are unknown")
    devices = _device_infos(parsed.deviceProperties, accelerator)
    if accelerator == "other":
        family = sorted(c.split("_")[0].upper() for c in categories if c and c.split("_")[0] != "cpu")
        devices = devices or [DeviceInfo(id=0, name=f"{family[0] if family else 'unknown'} accelerator", kind="other")]
        notes.append("device events come from a non-GPU accelerator: GPU analyses do not apply")
    meta = TraceMeta(
        path=str(path),
        format="kineto",
        devices=tuple(devices),
        rank=rank if isinstance(rank, int) else None,
        world_size=world if isinstance(world, int) else None,
        accelerator=accelerator,
        start_epoch_ns=int(base + t0 * 1000) if base or t0 > 1e14 else None,
        process_names=process_names,
        thread_names=thread_names,
        notes=tuple(notes),
    )
    return Trace(meta=meta, events=table, strings=string_table, memory=memory)


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
