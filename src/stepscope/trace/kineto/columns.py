"""Kineto events into numpy columns, batch by batch: spans, allocator samples and thread names."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from pathlib import Path

import numpy as np

from stepscope.errors import StepscopeError
from stepscope.trace.growing import GrowingColumn
from stepscope.trace.kineto.dialect import (
    CATEGORY_KIND,
    KNOWN_OTHER_CATEGORIES,
    MEMORY_EVENT_NAME,
    OTHER_ACCELERATOR_DEVICE_CATEGORIES,
    OTHER_ACCELERATOR_RUNTIME_CATEGORIES,
    SKIPPED_CATEGORIES,
    parse_memcpy_name,
)
from stepscope.trace.kineto.gather import FLOAT, INT, field_values, gathered, type_codes
from stepscope.trace.kineto.inputs import InputsInterner
from stepscope.trace.kineto.meta import trace_meta
from stepscope.trace.kineto.schema import (
    EVENT_TYPES,
    Args,
    Instant,
    InstantUpper,
    Metadata,
    Scalar,
    Span,
    TraceFile,
)
from stepscope.trace.kineto.values import as_int, float_column, int_column
from stepscope.trace.links import link_notes
from stepscope.trace.model import NONE, Events, Kind, MemoryEvents, Trace, distinct
from stepscope.trace.names import MAX_NAME_CHARS, bounded_name
from stepscope.trace.repairs import repaired
from stepscope.trace.source_annotations import OWN_ANNOTATION_PREFIX
from stepscope.trace.validation import MAX_SPAN_NS, launches_without_kernels

_PID, _TID, _TS, _DUR = attrgetter("pid"), attrgetter("tid"), attrgetter("ts"), attrgetter("dur")
_DEVICE, _STREAM, _BYTES, _FLOPS = attrgetter("device"), attrgetter("stream"), attrgetter("bytes"), attrgetter("flops")
_CORRELATION, _SEQUENCE, _FWD_TID = attrgetter("correlation"), attrgetter("sequence"), attrgetter("fwd_tid")
_EXTERNAL, _EXTERNAL_OLD = attrgetter("external_id"), attrgetter("external_id_old")
_INPUT_DIMS, _CALL_STACK = attrgetter("input_dims"), attrgetter("call_stack")
SPAN, INSTANT, METADATA = 1, 2, 3
EVENT_TYPE_CODE = {t: {Span: SPAN, Instant: INSTANT, InstantUpper: INSTANT, Metadata: METADATA}.get(t, 0)
                   for t in EVENT_TYPES}
MAX_SPAN_US = MAX_SPAN_NS / 1000
# The fields gathered in one C pass over a batch (gather.py): a span's times and ids, its args' ids and counts.
_TIMES = (("ts", FLOAT), ("dur", FLOAT))
_SPAN_IDS = (("pid", INT), ("tid", INT))
_DEVICE_IDS = (("device", INT), ("stream", INT))
_ARGS_FIELDS = (("external_id", INT), ("correlation", INT), ("sequence", INT), ("fwd_tid", INT), ("bytes", INT),
                ("flops", FLOAT))


@dataclass
class ColumnBuilder:
    """Accumulates numpy columns batch by batch; names are interned across batches."""

    columns: dict[str, GrowingColumn] = field(default_factory=dict)
    names: dict[Scalar, int] = field(default_factory=dict)
    categories: set[str | None] = field(default_factory=set)
    kind_of: dict[str | None, tuple[int, bool]] = field(default_factory=dict)
    category_code: dict[str | None, int] = field(default_factory=dict)  # each category's place in kind_of
    memory: dict[str, GrowingColumn] = field(default_factory=dict)
    process_names: dict[int, str] = field(default_factory=dict)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    inputs: InputsInterner = field(default_factory=InputsInterner)
    strings: list[str] = field(default_factory=list)  # by name id, long names shortened
    notes: list[str] = field(default_factory=list)  # what the reader repaired or left out
    replaced_bytes: int = 0  # bytes that were not UTF-8, replaced
    unreadable_events: int = 0  # events whose fields have types no dialect uses
    shortened_names: int = 0
    untimed_spans: int = 0  # spans without a time or a duration: left out
    call_stack_ops: int = 0  # spans with a "Call stack" string (old with_stack)
    unknown_categories: dict[str | None, int] = field(default_factory=dict)  # spans per category no dialect has

    def _kind(self, cat: str | None) -> tuple[int, bool]:
        """(kind, on a device) for a category, decided once per distinct category."""
        if cat not in self.kind_of:
            kind = CATEGORY_KIND.get(cat) if cat is not None else None
            if kind is None:
                kind = Kind.RUNTIME if cat in OTHER_ACCELERATOR_RUNTIME_CATEGORIES else Kind.OTHER
            on_device = kind >= Kind.KERNEL or cat in OTHER_ACCELERATOR_DEVICE_CATEGORIES
            self.category_code[cat] = len(self.kind_of)
            self.kind_of[cat] = (int(kind), bool(on_device))
            self.categories.add(cat)
            if cat not in CATEGORY_KIND and cat not in OTHER_ACCELERATOR_RUNTIME_CATEGORIES | KNOWN_OTHER_CATEGORIES:
                self.unknown_categories[cat] = 0
        return self.kind_of[cat]

    def _append(self, **arrays: np.ndarray) -> None:
        for key, array in arrays.items():
            if key not in self.columns:
                self.columns[key] = GrowingColumn(array.dtype)
            self.columns[key].extend(array)

    def add(self, events: list) -> None:
        # Events by type in C loops (flows and counters, a third of a trace, are only skipped).
        types = type_codes(events, EVENT_TYPE_CODE)
        spans, cats, distinct, ts, dur = self._timed_spans(list(compress(events, (types == SPAN).tolist())))
        for ev in compress(events, (types == METADATA).tolist()):
            self._metadata(ev)
        memory = [ev for ev in compress(events, (types == INSTANT).tolist())
                  if ev.name == MEMORY_EVENT_NAME and ev.args is not None and ev.ts is not None]
        if memory:
            self._add_memory(memory)
        if not spans:
            return
        for cat in distinct:
            self._kind(cat)
        if not distinct.isdisjoint(self.unknown_categories):
            for cat in cats:
                if cat in self.unknown_categories:
                    self.unknown_categories[cat] += 1
        # Each category's kind and place (host or device), looked up once per distinct category.
        codes = np.fromiter(map(self.category_code.__getitem__, cats), dtype=np.int32, count=len(cats))
        kind = np.array([k for k, _ in self.kind_of.values()], dtype=np.int8)[codes]
        on_device = np.array([d for _, d in self.kind_of.values()], dtype=bool)[codes]
        # Intern names: str caches its hash, so the second lookup of each name is cheap.
        names = field_values(spans, "name")
        for name in dict.fromkeys(names):
            if name not in self.names:
                self.names[name] = len(self.names)
                self._add_string(name if isinstance(name, str) else "" if name is None else str(name))
        name_ids = np.fromiter(map(self.names.__getitem__, names), dtype=np.int32, count=len(names))
        no_args = Args()
        args = field_values(spans, "args", no_args)  # `ev.args or no_args`: a struct is always true
        self.call_stack_ops += sum(map(bool, map(_CALL_STACK, args)))  # an empty Raw is false
        pid, tid = (_ints(get, spans, c) for get, c in zip((_PID, _TID), gathered(spans, _SPAN_IDS), strict=True))
        device, stream = _device_and_stream(args, on_device, pid, tid)
        external_c, correlation_c, sequence_c, fwd_tid_c, bytes_c, flops_c = gathered(args, _ARGS_FIELDS)
        external = _ints(_EXTERNAL, args, external_c)
        if (old := external == NONE).any():  # old Kineto spells it "external id"; read where the new spelling is not
            external[old] = _ints(_EXTERNAL_OLD, list(compress(args, old.tolist())))
        self._append(
            kind=kind, pid=pid, tid=tid, name=name_ids, external_id=external,
            device=device, stream=stream,
            ts=ts, dur=dur,
            correlation=_ints(_CORRELATION, args, correlation_c), sequence=_ints(_SEQUENCE, args, sequence_c),
            fwd_tid=_ints(_FWD_TID, args, fwd_tid_c), bytes=_ints(_BYTES, args, bytes_c),
            flops=_floats(_FLOPS, args, flops_c), inputs=self._inputs(args),
        )

    def _timed_spans(self, every_span: list[Span]) -> tuple[list[Span], list[str | None], set[str | None],
                                                            np.ndarray, np.ndarray]:
        """The spans kept (a time, a duration, a category not skipped), their categories (and the distinct ones),
        times and durations. A batch almost always keeps every span: read whole, and filtered only where it does
        not (a filter first, event by event, was ~5% of reading a trace)."""
        cats = field_values(every_span, "cat")
        distinct = set(cats)
        n = len(every_span)
        try:
            ts, dur = gathered(every_span, _TIMES)
            ts = ts if ts is not None else np.fromiter(map(_TS, every_span), dtype=np.float64, count=n)
            dur = dur if dur is not None else np.fromiter(map(_DUR, every_span), dtype=np.float64, count=n)
            if distinct.isdisjoint(SKIPPED_CATEGORIES):
                return every_span, cats, distinct, ts, dur
        except TypeError:  # a span without ts or dur (None)
            pass
        skipped = SKIPPED_CATEGORIES
        keep = [ev.dur is not None and ev.ts is not None and cat not in skipped
                for ev, cat in zip(every_span, cats, strict=True)]
        spans = list(compress(every_span, keep))
        self.untimed_spans += sum(cat not in skipped for cat in cats) - len(spans)
        cats = list(compress(cats, keep))
        return (spans, cats, set(cats), np.fromiter(map(_TS, spans), dtype=np.float64, count=len(spans)),
                np.fromiter(map(_DUR, spans), dtype=np.float64, count=len(spans)))

    def _inputs(self, args: list[Args]) -> np.ndarray:
        """Each span's recorded inputs (record_shapes) as an index into the interned table, else -1."""
        if not any(map(_INPUT_DIMS, args)):  # an empty Raw is false
            return np.full(len(args), NONE, dtype=np.int32)
        intern = self.inputs.intern
        return np.fromiter((intern(a.input_dims, a.input_type, a.concrete) for a in args), np.int32, len(args))

    def _add_string(self, name: str) -> None:
        shortened = bounded_name(name)
        self.shortened_names += shortened is not name
        self.strings.append(shortened)

    def _add_memory(self, events: list[Instant]) -> None:
        """Allocator samples ([memory] instants) as columns; device -1 is host memory."""
        args = [ev.args for ev in events]
        device_type = int_column([a.device_type for a in args], 0)  # type: ignore[union-attr]
        device_id = int_column([a.device_id for a in args])  # type: ignore[union-attr]
        columns = {
            "ts": np.array([ev.ts for ev in events], dtype=np.float64),
            "device": np.where(device_type != 0, device_id, NONE),
            "bytes": int_column([a.mem_bytes for a in args], 0),  # type: ignore[union-attr]
            "total_allocated": int_column([a.total_allocated for a in args]),  # type: ignore[union-attr]
            "total_reserved": int_column([a.total_reserved for a in args]),  # type: ignore[union-attr]
            "addr": int_column([a.addr for a in args]),  # type: ignore[union-attr]
            "pid": int_column([ev.pid for ev in events]),
            "tid": int_column([ev.tid for ev in events]),
        }
        for key, array in columns.items():
            if key not in self.memory:
                self.memory[key] = GrowingColumn(array.dtype)
            self.memory[key].extend(array)

    def _metadata(self, ev: Metadata) -> None:
        if ev.args is None or not isinstance(ev.args.name, str):
            return
        if ev.name == "process_name":
            self.process_names[as_int(ev.pid)] = bounded_name(ev.args.name)
        elif ev.name == "thread_name":
            self.thread_names[(as_int(ev.pid), as_int(ev.tid))] = bounded_name(ev.args.name)

    def finish(self, parsed: TraceFile, path: Path) -> Trace:
        if not self.columns and not self.memory:
            raise StepscopeError(f"{path}: the trace has no events with a duration (nothing to analyse)")
        cols = {k: self.columns.pop(k).take() for k in list(self.columns)}
        mem = {k: self.memory.pop(k).take() for k in list(self.memory)}
        cols, mem = self._in_range(cols, mem)
        mem_ts = mem.pop("ts", np.zeros(0))
        ts_us = cols.pop("ts", np.zeros(0))
        if not len(ts_us) and not len(mem_ts):
            raise StepscopeError(f"{path}: the trace has no events with a usable time (nothing to analyse)")
        t0 = float(min(ts_us.min() if len(ts_us) else np.inf, mem_ts.min() if len(mem_ts) else np.inf))
        # Subtract the origin in µs before scaling: epoch-sized µs floats keep their fraction that way.
        start = _ns(ts_us, t0)
        del ts_us
        dur = _ns(cols.pop("dur", np.zeros(0)), 0.0)
        for absent in [k for k in _MOSTLY_ABSENT if k in cols and _all_absent(cols[k])]:
            del cols[absent]  # the table's default, broadcast, holds no memory
        strings = tuple(self.strings)
        kind = cols.get("kind", np.zeros(0, np.int8))
        name = cols.get("name", np.zeros(0, np.int32))
        if "kind" in cols:
            cols["kind"] = kind = _own_annotations_as_annotations(kind, name, strings)
        copy_kind, host_memory = _copy_columns(kind, name, strings)
        if not cols:
            cols = {k: np.zeros(0, np.int64) for k in ("kind", "pid", "tid", "name")}
        cols.update(start=start, dur=dur, copy_kind=copy_kind, host_memory=host_memory)
        del start, dur, copy_kind, host_memory, kind, name
        table = Events.consume(cols)
        empty = np.zeros(0, np.int64)
        memory = MemoryEvents.from_columns(
            time=np.rint((mem_ts - t0) * 1000.0).astype(np.int64),
            device=mem.get("device", empty), bytes=mem.get("bytes", empty),
            total_allocated=mem.get("total_allocated", empty), total_reserved=mem.get("total_reserved", empty),
            addr=mem.get("addr"), pid=mem.get("pid"), tid=mem.get("tid"),
        )
        table = repaired(table, strings, self.notes)
        meta = trace_meta(parsed, path, table, strings, t0, categories={c for c in self.categories if c},
                          process_names=self.process_names, thread_names=self.thread_names,
                          notes=self._reader_notes(table, strings), call_stack_ops=self.call_stack_ops)
        return Trace(meta=meta, events=table, strings=strings, memory=memory, op_inputs=self.inputs.table())

    def _in_range(self, cols: dict[str, np.ndarray], mem: dict[str, np.ndarray],
                  ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Leave out events whose time or duration no clock can produce; they would poison every figure."""
        ts, dur, mem_ts = cols.get("ts", np.zeros(0)), cols.get("dur", np.zeros(0)), mem.get("ts", np.zeros(0))
        keep, keep_mem = plausible_times(ts, dur, mem_ts)
        dropped = int((~keep).sum()) + int((~keep_mem).sum())
        if dropped:
            bad = np.concatenate([ts[~keep], dur[~keep], mem_ts[~keep_mem]])
            self.notes.append(f"{dropped} events with a time or duration out of range (e.g. "
                              f"{_worst(bad):.4g} µs) were left out")
            for k in cols:  # one column at a time
                cols[k] = cols[k][keep]
            for k in mem:
                mem[k] = mem[k][keep_mem]
        return cols, mem

    def _reader_notes(self, table: Events, strings: tuple[str, ...]) -> list[str]:
        notes = list(self.notes)
        if self.untimed_spans:
            notes.append(f"{self.untimed_spans:,} events without a time or a duration (ts, dur) were left out")
        if unknown := {c: n for c, n in self.unknown_categories.items() if n}:
            # By count, ties by name: the categories were met in a set's order, which the hash seed decides.
            ranked = sorted(unknown.items(), key=lambda kv: (-kv[1], kv[0] or ""))
            listed = ", ".join(f"{c or 'none'!r}: {n:,}" for c, n in ranked)
            notes.append(f"{sum(unknown.values()):,} events have a category no profiler dialect uses (cat {listed}): "
                         "taken as other host work")
        if note := launches_without_kernels(table, strings):
            notes.append(note)
        notes += link_notes(table, strings)
        if self.replaced_bytes:
            notes.append(f"{self.replaced_bytes} bytes that are not UTF-8 (in names) were replaced by U+FFFD")
        if self.unreadable_events:
            notes.append(f"{self.unreadable_events} events whose fields have the wrong types were left out")
        if self.shortened_names:
            notes.append(f"{self.shortened_names} names longer than {MAX_NAME_CHARS:,} characters were shortened "
                         "(their first characters and a hash are kept)")
        return notes


def _ints(get: attrgetter, items: list, column: np.ndarray | None = None) -> np.ndarray:
    """A column of ids: in one C loop when every value is an int (absent ones default to -1), else value by
    value as int_column does (null, floats out of range, "0x0" strings). Ids no int64 holds are absent. `column`:
    the values gathered already (gather.gathered), when they were."""
    if column is None:
        try:
            column = np.fromiter(map(get, items), dtype=np.int64, count=len(items))
        except (TypeError, ValueError, OverflowError):
            return int_column(list(map(get, items)))
    wild = (column >= 2**62) | (column <= -(2**62))
    if wild.any():
        column[wild] = NONE
    return column


def _device_and_stream(args: list[Args], on_device: np.ndarray, pid: np.ndarray, tid: np.ndarray,
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Device and stream columns: a device event's from its args (old traces give them only as pid and tid), absent
    for a host event. Read from the device events' args alone: most spans are the host's."""
    device = np.full(len(args), NONE, dtype=np.int32)
    stream = np.full(len(args), NONE, dtype=np.int64)
    if on_device.any():
        on = list(compress(args, on_device.tolist()))
        arg_device, arg_stream = (_ints(get, on, c) for get, c in zip((_DEVICE, _STREAM), gathered(on, _DEVICE_IDS),
                                                                      strict=True))
        device[on_device] = np.where(arg_device >= 0, arg_device, pid[on_device])
        stream[on_device] = np.where(arg_stream >= 0, arg_stream, tid[on_device])
    return device, stream


def _floats(get: attrgetter, items: list, column: np.ndarray | None = None) -> np.ndarray:
    if column is not None:
        return column
    try:
        return np.fromiter(map(get, items), dtype=np.float64, count=len(items))
    except (TypeError, ValueError, OverflowError):
        return float_column(list(map(get, items)))


_MOSTLY_ABSENT = ("sequence", "fwd_tid", "bytes", "flops", "inputs", "external_id", "correlation")


def _all_absent(column: np.ndarray) -> bool:
    return bool(np.isnan(column).all()) if column.dtype.kind == "f" else bool((column == NONE).all())


def _ns(us: np.ndarray, origin: float) -> np.ndarray:
    """µs floats as integer ns from `origin`, computed in place (the float column is the caller's to lose)."""
    us = us.astype(np.float64, copy=True) if not us.flags.writeable else us
    us -= origin
    us *= 1000.0
    np.rint(us, out=us)
    ns = us.view(np.int64)  # cast in place, element by element: no second column (the 1 GB trace's peak -46 MB)
    np.copyto(ns, us, casting="unsafe")
    return ns


def plausible_times(ts: np.ndarray, dur: np.ndarray, mem_ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the spans and samples whose times lie within MAX_SPAN_US of the trace's median time and whose
    durations are finite, non-negative and under MAX_SPAN_US."""
    # The median of at most ~100k evenly spaced times: as robust to a few wild values, without copying them all.
    step = max(1, (len(ts) + len(mem_ts)) // 100_000)
    times = np.concatenate([ts[::step], mem_ts[::step]])
    finite = times[np.isfinite(times)]
    middle = float(np.median(finite)) if len(finite) else 0.0
    with np.errstate(invalid="ignore"):
        keep = (np.abs(ts - middle) <= MAX_SPAN_US) & (dur >= 0) & (dur <= MAX_SPAN_US)
        keep_mem = np.abs(mem_ts - middle) <= MAX_SPAN_US
    return keep, keep_mem


def _worst(values: np.ndarray) -> float:
    """The value furthest from sane, to quote in the note."""
    finite = values[np.isfinite(values)]
    if len(finite) < len(values):
        return float(values[~np.isfinite(values)][0])
    return float(finite[np.argmax(np.abs(finite))])


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
        for i in distinct(name[rows]):
            lut_kind[i], lut_memory[i] = parse_memcpy_name(strings[i])
        copy_kind[rows] = lut_kind[name[rows]]
        host_memory[rows] = lut_memory[name[rows]]
    return copy_kind, host_memory
