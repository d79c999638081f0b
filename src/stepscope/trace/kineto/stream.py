"""The events of a Kineto trace as batches of raw JSON, read as the file streams in: the whole text is never
held, only one batch and the piece being read.

A batch is cut after an event's closing brace that a comma and the next event's opening brace follow
(`}, {`); the cut is right when the batch decodes as an array, and only there (a brace inside a string or a
nested object leaves the array unbalanced), so a wrong cut is found by its decode failing, and an earlier one
is tried. The object around the events (deviceProperties, distributedInfo, baseTimeNanoseconds, before or
after traceEvents) is kept as text and decoded with an empty event list. Anything else (no traceEvents key, a
byte-order mark, JSON a strict parser refuses) raises NotStreamable: the whole-file reader, which repairs,
takes over.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

# JSON per batch: the Python objects of one batch stay a few MB. Small enough that each batch reuses the memory the
# last one freed (8 MB batches made the V100 DDP trace's first read fault in 24k fresh pages, 2 MB ones 12k: 0.31 ->
# 0.25 s, peak 109 -> 78 MB; the 456k-event MTIA trace 0.55 -> 0.47 s, 125 -> 86 MB), large enough that the cuts
# and decoder calls per batch cost nothing to speak of.
BATCH_BYTES = 2 << 20
MAX_HEADER_BYTES = 64 << 20  # the object before traceEvents: device properties, a few keys
MAX_CUTS_TRIED = 8
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BETWEEN = re.compile(rb"\}\s*,\s*\{")
_LAST = re.compile(rb"\}\s*\]")
_EMPTY = re.compile(rb"\s*\]")
_SPACE = b" \t\r\n"


def _array(buffer: bytearray, end: int) -> bytes:
    """`[` + buffer[:end] + `]`, copied once."""
    with memoryview(buffer) as view:
        return b"".join((b"[", view[:end], b"]"))


class NotStreamable(Exception):
    """The file is not the plain JSON the streaming reader takes; read it whole."""


class EventBatches(Generic[T]):
    """Cut the pieces of a trace's text into batches of events, each handed to `decode` as a JSON array;
    `decode` returns None when the text is not a valid array (a wrong cut). After the iteration, `outline` is
    the text of the top level with an empty event list."""

    def __init__(self, pieces: Iterator[bytes], decode: Callable[[bytes], T | None]) -> None:
        self._pieces = pieces
        self._decode = decode
        self._buffer = bytearray()
        self._ended = False
        self.outline = b""

    def _more(self) -> bool:
        piece = next(self._pieces, None)
        if piece is None:
            self._ended = True
            return False
        self._buffer += piece
        return True

    def __iter__(self) -> Iterator[T]:
        header = self._header()
        empty = _EMPTY.match(self._buffer)
        while not empty and len(self._buffer) < 2 and self._more():
            empty = _EMPTY.match(self._buffer)
        if empty:
            self._finish(header, empty.end())
            return
        while True:
            while len(self._buffer) < BATCH_BYTES and self._more():
                pass
            if self._ended:
                yield from self._last(header)
                return
            batch, cut = self._cut()
            del self._buffer[:cut]
            yield batch

    def _header(self) -> bytes:
        """Read up to the first event; the text before the event list, with its `[`."""
        while True:
            head = bytes(self._buffer[:64]).lstrip(_SPACE)
            if head[:1] == b"[":  # a bare event list
                at = self._buffer.index(b"[") + 1
                del self._buffer[:at]
                return b"["
            if head[:1] not in (b"{", b""):
                raise NotStreamable
            found = _EVENTS_KEY.search(self._buffer)
            if found:
                header = bytes(self._buffer[: found.end()])
                del self._buffer[: found.end()]
                return header
            if len(self._buffer) > MAX_HEADER_BYTES or not self._more():
                raise NotStreamable

    def _cut(self) -> tuple[T, int]:
        """The longest batch of whole events in the buffer, and where the next event starts."""
        tried = 0
        end = len(self._buffer)
        while tried < MAX_CUTS_TRIED:
            window = max(0, end - (64 << 10))  # events are short: the last cut is near the end
            matches = list(_BETWEEN.finditer(self._buffer, window, end))
            if not matches:
                if window == 0:
                    break
                end = window + 16  # a gap longer than the window: look further back
                continue
            for match in reversed(matches):
                tried += 1
                events = self._decode(_array(self._buffer, match.start() + 1))
                if events is not None:
                    return events, match.end() - 1
                if tried >= MAX_CUTS_TRIED:
                    break
            end = matches[0].start() + 1
        if self._more():  # one event larger than a batch, or no cut found yet: read on
            return self._cut()
        raise NotStreamable

    def _last(self, header: bytes) -> Iterator[T]:
        """At the end of the text: the last events up to the list's `]`, then the rest of the top level."""
        for match in _LAST.finditer(self._buffer):
            events = self._decode(_array(self._buffer, match.start() + 1))
            if events is not None:
                yield events
                self._finish(header, match.end())
                return
        raise NotStreamable

    def _finish(self, header: bytes, list_end: int) -> None:
        while self._more():
            pass
        self.outline = header + b"]" + bytes(self._buffer[list_end:])
