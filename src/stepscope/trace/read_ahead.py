"""An iterator run on a second thread, a few items ahead of its consumer. Reading a file and gunzipping it release
the GIL, so a trace's decompression runs on another core while this one decodes the pieces before it."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
_POLL_S = 0.1  # how often a producer waiting for room checks whether the consumer has gone


@dataclass(frozen=True)
class _End:
    """The end of the items, handed from the reading thread."""

    error: BaseException | None  # what ended the items early, raised in the consumer


def read_ahead(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    """The items of `items`, produced on a thread at most `depth` ahead (memory stays `depth` items); an error the
    items raise is raised here, in order. A consumer that stops early stops the thread at its next item."""
    ready: queue.Queue[T | _End] = queue.Queue(maxsize=depth)
    gone = threading.Event()

    def put(item: T | _End) -> bool:
        while not gone.is_set():
            try:
                ready.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
        except BaseException as exc:  # handed over: the consumer raises it where it would have come from
            put(_End(exc))
            return
        put(_End(None))

    thread = threading.Thread(target=produce, name="stepscope-read-ahead", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no thread to be had (a limit on processes): read on this one
        yield from items
        return
    try:
        while True:
            item = ready.get()
            if isinstance(item, _End):
                if item.error is not None:
                    raise item.error
                return
            yield item
    finally:
        gone.set()
        with suppress(queue.Empty):  # room for a producer waiting to put: it sees `gone` at once, not a poll later
            while True:
                ready.get_nowait()
        thread.join(timeout=5 * _POLL_S)
