"""`stepscope lsp`'s framing against a careless or hostile client (issue 42, item 7), over raw stdio bytes: after a
wrong Content-Length the server answers the next message again (resync), a length over the cap is answered and
skipped (it ended the server with MemoryError), a body that is not JSON-RPC gets its JSON-RPC error code, a request
before initialize gets -32002, and initialize with options of the wrong types still succeeds."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pygls")

WAIT_S = 60


class Raw:
    """The server's stdin as bytes, its stdout as the messages it framed."""

    def __init__(self, cwd: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "stepscope", "lsp"], cwd=cwd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, "OMP_NUM_THREADS": "1"})
        self.got: queue.Queue[dict[str, Any]] = queue.Queue()
        self.notes: list[dict[str, Any]] = []  # what came while an answer was awaited
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while (line := out.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if not line or length is None:
                return
            self.got.put(json.loads(out.read(length)))

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def message(self, value: Any) -> bytes:
        body = json.dumps(value).encode()
        return b"Content-Length: %d\r\n\r\n" % len(body) + body

    def request(self, msg_id: int, method: str, params: Any = None) -> bytes:
        return self.message({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})

    def answer(self, msg_id: int | None) -> dict[str, Any]:
        """The next response with this id (notifications such as window/showMessage are kept aside)."""
        while True:
            msg = self.got.get(timeout=WAIT_S)
            if "method" not in msg and msg.get("id") == msg_id:
                return msg
            self.notes.append(msg)


def init(root: Path, **options: Any) -> dict[str, Any]:
    return {"processId": None, "rootUri": root.as_uri(), "capabilities": {}, "initializationOptions": options}


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[Raw]:
    r = Raw(tmp_path)
    yield r
    if r.proc.poll() is None:
        r.proc.kill()
    r.proc.wait(10)


def test_before_initialize_a_request_is_answered_32002(raw: Raw, tmp_path: Path) -> None:
    raw.send(raw.request(1, "textDocument/inlayHint", {"textDocument": {"uri": "file:///x.py"},
                                                       "range": {"start": {"line": 0, "character": 0},
                                                                 "end": {"line": 1, "character": 0}}}))
    assert raw.answer(1)["error"]["code"] == -32002
    raw.send(raw.request(2, "initialize", init(tmp_path)))
    assert "capabilities" in raw.answer(2)["result"]


def test_wrong_option_types_are_warnings_and_initialize_succeeds(raw: Raw, tmp_path: Path) -> None:
    raw.send(raw.request(1, "initialize", init(tmp_path, cwd=5, program={"a": 1}, runOptions="x",
                                               debounce=1e309)))  # 1e309: JSON's Infinity by another name
    assert "capabilities" in raw.answer(1)["result"]
    warnings = [m["params"]["message"] for m in raw.notes if m.get("method") == "window/showMessage"]
    assert {w.split()[1] for w in warnings} == {"initializationOptions.cwd", "initializationOptions.program",
                                                 "initializationOptions.runOptions", "initializationOptions.debounce"}
    raw.send(raw.request(2, "initialize", {"processId": None, "capabilities": {}, "initializationOptions": [1]}))
    raw.answer(2)  # a second initialize is the library's to refuse or take; the server answers and lives


def test_after_framing_errors_the_server_answers_again(raw: Raw, tmp_path: Path) -> None:
    raw.send(raw.request(1, "initialize", init(tmp_path)))
    raw.answer(1)
    good = raw.request(2, "shutdownish/unknown")
    body = good.split(b"\r\n\r\n", 1)[1]
    # A length 10 bytes too long swallows the start of the next message; its header is then glued to the tail.
    raw.send(b"Content-Length: %d\r\n\r\n" % (len(body) + 10) + body + raw.request(3, "a/b"))
    raw.send(raw.request(4, "c/d"))
    assert raw.answer(None)["error"]["code"] == -32700  # the swallowed-into body is not JSON
    assert raw.answer(4)["error"]["code"] == -32601  # method not found: answered, so in sync again
    raw.send(b"Content-Length: 99999999999999\r\n\r\n" + b"x" * 1000)  # never sent whole
    raw.send(raw.request(5, "e/f"))
    assert "limit" in raw.answer(None)["error"]["message"]
    assert raw.answer(5)["error"]["code"] == -32601
    raw.send(b"Content-Length: abc\r\n\r\n{}" + raw.request(6, "g/h"))
    assert raw.answer(None)["error"]["code"] == -32600
    assert raw.answer(6)["error"]["code"] == -32601
    deep = b"[" * 200_000 + b"]" * 200_000
    raw.send(b"Content-Length: %d\r\n\r\n" % len(deep) + deep)
    assert raw.answer(None)["error"]["code"] == -32700
    raw.send(raw.message([1, 2]) + raw.message({"jsonrpc": "2.0", "id": 7, "method": "initialize",
                                                "params": {"capabilities": 5}}))
    assert raw.answer(None)["error"]["code"] == -32600
    assert raw.answer(7)["error"]["code"] == -32602
    raw.send(raw.request(8, "shutdown") + raw.message({"jsonrpc": "2.0", "method": "exit"}))
    assert raw.answer(8)["result"] is None
    assert raw.proc.wait(WAIT_S) == 0
    assert b"Traceback" not in (raw.proc.stderr.read() if raw.proc.stderr else b"")
