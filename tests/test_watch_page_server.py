"""`stepscope watch --page`'s server against hostile and careless clients (issue 42, item 2), with a watch session
driven by hand-built results (no capture): every query value is checked (a 400 with its reason, the session left
as it was), a handler's error is one line under the view and the server keeps answering, and connections that send
half a request are closed after the socket's timeout instead of holding a thread each."""

from __future__ import annotations

import http.client
import json
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stepscope.live.page import PageServer
from stepscope.live.terminal import render
from stepscope.live.watch import WatchSession
from stepscope.model.batches import MAX_BATCH
from test_watch_session import finish, session


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[WatchSession, PageServer]]:
    s = session(tmp_path)
    finish(s, 1, 100.0)  # steps 90, 100, 110 us at 16e4 samples/s: batch 16, a 100 us step
    s.measurer.submit = lambda: 1  # type: ignore[method-assign]  # no capture
    page = PageServer(s, timeout_s=0.5).start()
    yield s, page
    page.close()
    s.close()


def ask(page: PageServer, method: str, path: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", page.port, timeout=5)
    try:
        conn.request(method, path, headers={"Host": f"127.0.0.1:{page.port}", "X-Stepscope": "1"})
        res = conn.getresponse()
        return res.status, json.loads(res.read())
    finally:
        conn.close()


# A space, Arabic-Indic five and NUL percent-encoded (int() takes the first two), then too many digits.
BAD = ["9" * 400, "0", "-1", "%2B5", "%205", "1_0", "%D9%A5", "5%00", "1e3", "5.0", "", str(MAX_BATCH + 1),
       "1" * 13]


@pytest.mark.parametrize("value", BAD)
def test_a_bad_batch_is_a_400_with_its_reason_and_changes_nothing(served, value: str) -> None:
    s, page = served
    before = s.version
    for method, path in (("GET", "/predict"), ("POST", "/measure")):
        status, body = ask(page, method, f"{path}?batch={value}")
        assert status == 400 and "whole number" in body["error"], (path, body)
    assert s.measurements == {} and s.version == before
    render(s.snapshot())  # what watch's main thread draws on every change: it raised OverflowError before


def test_twice_given_is_a_400_and_good_batches_are_answered(served) -> None:
    s, page = served
    assert ask(page, "GET", "/predict?batch=2&batch=3")[0] == 400
    # The fallback model: cpu_exec is 75 of the 100 us step, so it grows 75 us per extra batch of 16.
    status, body = ask(page, "GET", "/predict?batch=32")
    assert status == 200 and body["step_us"] == pytest.approx(175.0)
    assert ask(page, "GET", f"/predict?batch={MAX_BATCH}")[0] == 200  # the bound itself is a batch
    assert ask(page, "POST", f"/measure?batch={MAX_BATCH}") == (200, {"error": None, "batch_size": MAX_BATCH})
    rows = [r["batch_size"] for r in s.snapshot()["batch"]["rows"]]
    assert MAX_BATCH in rows
    render(s.snapshot())


def test_a_failing_handler_is_one_line_under_the_view(served, capfd) -> None:
    s, page = served
    real = s.snapshot

    def planted() -> dict:
        raise RuntimeError("planted\nsecond line")

    s.snapshot = planted  # type: ignore[method-assign]
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        ask(page, "GET", "/state")
    s.snapshot = real  # type: ignore[method-assign]
    assert ask(page, "GET", "/state")[0] == 200  # still serving
    assert len(s.notes) == 1 and "RuntimeError: planted second line" in s.notes[0]
    assert s.notes[0] in s.snapshot()["notes"]
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err


def test_a_client_that_resets_its_stream_is_no_traceback(served, capfd) -> None:
    s, page = served
    sock = socket.create_connection(("127.0.0.1", page.port))
    sock.sendall(f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{page.port}\r\n\r\n".encode())
    got = b""
    while b"data: " not in got:
        got += sock.recv(65536)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # close with a RST
    sock.close()
    s.note("a change, so the stream writes into the reset connection")
    time.sleep(0.3)
    assert ask(page, "GET", "/state")[0] == 200
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err


def test_half_sent_requests_are_closed_after_the_timeout(served) -> None:
    _, page = served  # a 0.5 s timeout
    threads = threading.active_count()
    socks = [socket.create_connection(("127.0.0.1", page.port)) for _ in range(100)]
    for sock in socks:
        sock.sendall(b"GET /state HTTP/1.1\r\nHost: 127.0")  # never finished
    open_ = set(socks)
    deadline = time.monotonic() + 20
    with selectors.DefaultSelector() as sel:
        for sock in socks:
            sel.register(sock, selectors.EVENT_READ)
        while open_ and time.monotonic() < deadline:
            for key, _ in sel.select(0.5):
                assert key.fileobj.recv(100) == b""  # type: ignore[union-attr]  # closed, with no answer
                sel.unregister(key.fileobj)
                open_.discard(key.fileobj)  # type: ignore[arg-type]
    assert not open_, f"{len(open_)} of 100 still held"
    for sock in socks:
        sock.close()
    time.sleep(0.2)
    assert threading.active_count() == threads  # each thread released
    assert ask(page, "GET", "/state")[0] == 200
