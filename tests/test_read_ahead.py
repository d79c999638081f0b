"""trace.read_ahead: the items in order, the producer's error raised in the consumer, the thread gone when the
consumer stops early; and a corrupt or truncated gzip still ends as the reader's one-line error through it."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stepscope.errors import StepscopeError
from stepscope.trace.load import read_trace
from stepscope.trace.read_ahead import read_ahead


def test_items_in_order() -> None:
    assert list(read_ahead(iter(range(1000)), depth=3)) == list(range(1000))


def test_an_error_arrives_after_the_items_before_it() -> None:
    def items() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("broken at 3")

    got = []
    with pytest.raises(ValueError, match="broken at 3"):
        for x in read_ahead(items()):
            got.append(x)
    assert got == [1, 2]


def test_a_consumer_that_stops_early_stops_the_thread() -> None:
    produced = []

    def endless() -> Iterator[int]:
        n = 0
        while True:
            produced.append(n)
            yield n
            n += 1

    ahead = read_ahead(endless(), depth=2)
    assert [next(ahead) for _ in range(5)] == [0, 1, 2, 3, 4]
    ahead.close()  # what a `for` loop left by an exception does
    time.sleep(0.3)
    count = len(produced)
    time.sleep(0.3)
    assert len(produced) == count <= 5 + 2 + 1  # at most depth items ahead, and none since
    assert not any(t.name == "stepscope-read-ahead" and t.is_alive() for t in threading.enumerate())


def test_without_a_thread_it_reads_on_this_one(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    assert list(read_ahead(iter("abc"))) == ["a", "b", "c"]


def test_a_truncated_gzip_is_still_one_line_naming_the_file(tmp_path: Path) -> None:
    body = b'{"traceEvents": [' + b",".join(b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, '
                                          b'"tid": 1, "ts": %d, "dur": 5}' % i for i in range(20000)) + b"]}"
    whole = gzip.compress(body)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(StepscopeError, match=r"cut\.json\.gz: truncated gzip"):
        read_trace(path)
    corrupt = bytearray(whole)
    corrupt[len(whole) // 2: len(whole) // 2 + 64] = b"\xff" * 64
    path.write_bytes(bytes(corrupt))
    with pytest.raises(StepscopeError, match=r"cut\.json\.gz: corrupt gzip"):
        read_trace(path)
