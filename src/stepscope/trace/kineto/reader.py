"""Reader for PyTorch profiler (Kineto) Chrome-trace JSON: .json, .json.gz, every dialect in the wild.

Memory is the constraint on big traces, so decoding happens in two passes: first the event list as raw
JSON slices (views into the buffer), then batches of slices into typed structs that are turned into
numpy columns and dropped before the next batch. Only one batch of Python objects is alive at a time.
The types live in `schema`, the columns are built in `columns`, the metadata in `meta`.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import numpy as np

from stepscope.errors import StepscopeError
from stepscope.trace.files import read_bytes, read_pieces
from stepscope.trace.kineto.columns import ColumnBuilder
from stepscope.trace.kineto.repair import repair, replace_invalid_utf8, strip_bom, where
from stepscope.trace.kineto.schema import (
    BATCH_DECODER,
    EVENT_DECODER,
    FILE_DECODER,
    LIST_DECODER,
    DeviceProperties,
    TraceFile,
)
from stepscope.trace.kineto.stream import EventBatches, NotStreamable
from stepscope.trace.model import Trace

BATCH = 16_384  # events decoded to Python objects at once
BATCH_BYTES = 64 << 20  # ... or fewer, when their JSON is this large (events with megabyte names)


Progress = Callable[[int, int], None]  # (bytes of the file read, its size)


def read_kineto(path: str | Path, progress: Progress | None = None) -> Trace:
    """Read one Kineto trace file into the columnar model: streamed when it is plain JSON (memory follows the
    columns, not the text), else whole, with the repairs a strict parser needs."""
    path = Path(path)
    # Hundreds of thousands of small objects are made and none is cyclic: the collector only costs time.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            return _read_streaming(path, progress)
        except NotStreamable:
            return _read_whole(path)
    finally:
        if gc_was_enabled:
            gc.enable()


def _read_streaming(path: Path, progress: Progress | None) -> Trace:
    pieces, size, position = read_pieces(path)
    builder = ColumnBuilder()

    def decode(text: bytes) -> list | None:
        # Bytes that are not UTF-8 are replaced here, not left to the JSON library: msgspec 0.22 raised on
        # them, 0.23 drops them silently. Counted only for a batch that decodes (a wrong cut is cut again).
        text, replaced = replace_invalid_utf8(text)
        try:
            events = BATCH_DECODER.decode(text)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            try:  # valid JSON with a type surprise: event by event; not JSON: a wrong cut (or a file to repair)
                raws = LIST_DECODER.decode(text)
            except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
                return None
            events = _decode_events(raws, builder)
        builder.replaced_bytes += replaced
        return events

    batches = EventBatches(pieces, decode)
    for events in batches:
        builder.add(events)
        if progress is not None:
            progress(position(), size)
    try:
        outline = batches.outline
        parsed = TraceFile(traceEvents=[]) if outline[:1] == b"[" else FILE_DECODER.decode(outline)
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise NotStreamable from None
    return builder.finish(parsed, path)


def _read_whole(path: Path) -> Trace:
    data = read_bytes(path)
    builder = ColumnBuilder()
    parsed, data = _decode_outline(data, path, builder.notes)
    if parsed.traceEvents is None:
        raise _not_a_trace(parsed, path)
    events = parsed.traceEvents
    parsed.traceEvents = None
    for lo, hi in _batches(events):
        builder.add(_decode_batch(events[lo:hi], builder))
    del events, data
    return builder.finish(parsed, path)


def _batches(events: list[msgspec.Raw]) -> Iterator[tuple[int, int]]:
    """[lo, hi) ranges of at most BATCH events and, unless one event alone is larger, BATCH_BYTES of JSON."""
    ends = np.cumsum(np.fromiter(map(len, events), dtype=np.int64, count=len(events)))
    lo = 0
    while lo < len(events):
        base = int(ends[lo - 1]) if lo else 0
        hi = min(lo + BATCH, int(np.searchsorted(ends, base + BATCH_BYTES, side="right")))
        hi = max(hi, lo + 1)
        yield lo, hi
        lo = hi


def document(path: Path) -> tuple[bytes | bytearray | memoryview, TraceFile | list]:
    """The file's JSON as the reader repaired it (for copying its events elsewhere) and its top level."""
    data = read_bytes(path)
    parsed, data = _decode_outline(data, path, [])
    fixed, count = replace_invalid_utf8(bytes(data))  # the reader repairs names batch by batch
    return fixed if count else data, parsed


def _decode_outline(data: bytes | bytearray, path: Path, notes: list[str],
                    ) -> tuple[TraceFile, bytes | bytearray | memoryview]:
    """The top level, and the bytes its raw events point into (repaired when the strict parse failed)."""
    data, bom = strip_bom(data)
    if bom:
        notes.append("the file starts with a UTF-8 byte-order mark (ignored)")
    start = bytes(data[:4096]).lstrip()[:1]
    if start not in (b"{", b"["):
        raise StepscopeError(f"{path}: not JSON (a PyTorch profiler trace is a JSON object with traceEvents)")
    try:
        return _outline(data, start, path), data
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        repaired, repairs = repair(data)
        if not repairs:
            raise StepscopeError(f"{path}: invalid JSON ({where(data, str(exc))})") from None
    try:
        parsed = _outline(repaired, start, path)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise StepscopeError(f"{path}: invalid JSON ({where(repaired, str(exc))})") from None
    notes.extend(repairs)
    return parsed, repaired


def _outline(data: bytes | bytearray | memoryview, start: bytes, path: Path) -> TraceFile:
    try:
        try:
            if start == b"[":
                return TraceFile(traceEvents=LIST_DECODER.decode(data))
            return FILE_DECODER.decode(data)
        except msgspec.ValidationError as exc:
            return _outline_leniently(data, path, exc)
    except RecursionError:
        raise StepscopeError(f"{path}: JSON nested too deeply to be a profiler trace") from None


def _outline_leniently(data: bytes | bytearray | memoryview, path: Path, error: Exception) -> TraceFile:
    """The file's top level has unexpected types: keep what still makes sense."""
    raw = msgspec.json.decode(data)
    if not isinstance(raw, dict) or not isinstance(raw.get("traceEvents"), list):
        raise StepscopeError(f"{path}: not a PyTorch profiler trace ({error})")
    encode = msgspec.json.encode
    devices = []
    listed = raw.get("deviceProperties")
    for item in listed if isinstance(listed, list) else []:
        try:
            devices.append(msgspec.convert(item, DeviceProperties, strict=False))
        except (msgspec.ValidationError, TypeError):
            continue
    info = raw.get("distributedInfo")
    return TraceFile(
        traceEvents=[msgspec.Raw(encode(e)) for e in raw["traceEvents"]],
        deviceProperties=devices,
        distributedInfo=info if isinstance(info, dict) else None,
    )


def _decode_batch(raws: list[msgspec.Raw], builder: ColumnBuilder) -> list:
    """Typed decode of a batch (its bytes that are not UTF-8 replaced and counted by us, whatever the JSON
    library would do with them); on a surprise, decode event by event and keep the ones that convert."""
    joined, replaced = replace_invalid_utf8(b"[" + b",".join(raws) + b"]")
    builder.replaced_bytes += replaced
    try:
        return BATCH_DECODER.decode(joined)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        pass
    return _decode_events(LIST_DECODER.decode(joined), builder)


def _decode_events(raws: list[msgspec.Raw], builder: ColumnBuilder) -> list:
    """Event by event, keeping those that convert (their text already valid UTF-8)."""
    events = []
    for raw in raws:
        try:
            events.append(EVENT_DECODER.decode(raw))
        except (msgspec.ValidationError, msgspec.DecodeError, TypeError, RecursionError):
            builder.unreadable_events += 1
    return events
def _not_a_trace(parsed: TraceFile, path: Path) -> StepscopeError:
    if parsed.nodes is not None:
        return StepscopeError(
            f"{path}: this is a PyTorch execution trace (nodes, no traceEvents), not a profiler trace",
            hint="record with torch.profiler.profile(...) and export_chrome_trace, or use `stepscope run`",
        )
    return StepscopeError(f"{path}: not a PyTorch profiler trace (no traceEvents list)")
