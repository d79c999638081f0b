"""A big trace read by two processes: this one decodes the first batches of events, a forked copy
(stepscope.forked) the rest, and the copy's columns join this one's as if this process had read them all.

Both cut the same text into the same batches (stream.EventBatches: a cut is right where its batch parses as a JSON
array, which the copy checks without building the events of the batches it leaves to this process). The copy says
where its first batch starts; this process takes its columns only when that is where its own last batch ended, and
otherwise reads on itself, as it does when the copy fails.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from stepscope.trace.files import read_pieces
from stepscope.trace.kineto.columns import ColumnBuilder
from stepscope.trace.kineto.schema import BATCH_DECODER, LIST_DECODER
from stepscope.trace.kineto.stream import BATCH_BYTES, EventBatches

# Below this many batches a trace reads in a few tens of ms: the copy's start and its columns' journey cost more.
MIN_BATCHES = 3
_GZIP_MAGIC = b"\x1f\x8b"

Decoder = Callable[[bytes], "list | None"]


@dataclass(frozen=True)
class Later:
    """What the copy read: where its batches start in the text, the text's top level, and their columns."""

    start: int
    outline: bytes
    builder: ColumnBuilder


def split_point(path: Path) -> int | None:
    """How many batches this process decodes before the copy's: half of the text as the file's size says it (a gzip
    file's trailer holds the text's length, modulo 4 GiB: an estimate, which only moves the split), rounded down,
    as this process also merges and builds the table after (on the V100 DDP trace, 3 of 7 batches: 0.56 s against
    0.59 with 4); None for a trace too small to split."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            if f.read(2) == _GZIP_MAGIC and size >= 18:
                f.seek(-4, 2)
                size = max(int.from_bytes(f.read(4), "little"), size)
    except OSError:
        return None
    batches = size / BATCH_BYTES
    return math.floor(batches / 2) if batches >= MIN_BATCHES else None


def later_batches(path: Path, first: int, decoder: Callable[[ColumnBuilder], Decoder]) -> Later | None:
    """The copy's part: every batch after the first `first`, decoded into a builder of its own (None when the trace
    has no more than `first` batches: this process reads it all)."""
    builder = ColumnBuilder()
    decode = decoder(builder)
    skipped = 0

    def skip_or_decode(text: bytes) -> list | None:
        nonlocal skipped
        if skipped == first:
            return decode(text)
        if not _parses(text):  # a wrong cut (a `}, {` inside a name): the decoder says None too
            return None
        skipped += 1
        return []

    batches = EventBatches(read_pieces(path)[0], skip_or_decode)
    start = None
    for count, events in enumerate(batches, 1):
        if count == first:
            start = batches.consumed
        elif count > first:
            builder.add(events)
    return Later(start, batches.outline, builder) if start is not None else None


def _parses(text: bytes) -> bool:
    """Whether the reader's decoder takes the batch (it returns None exactly when both of these fail), without
    building its events: raw slices first, which nearly always parse."""
    for decoder in (LIST_DECODER, BATCH_DECODER):
        try:
            decoder.decode(text)
            return True
        except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            continue
    return False
