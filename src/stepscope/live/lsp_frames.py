"""`stepscope lsp`'s own reading of its input, in place of pygls's loop (pygls.io_.run_async), which takes a
Content-Length header only at the start of a line (after one wrong length the next header is glued to the body's
tail, and every message after it is lost), reads any length it is given (99999999999999 bytes: MemoryError) and
passes requests on before initialize. Here a header is found wherever a line ends with it (resync), a message over
MAX_MESSAGE is answered and skipped, a body that is not JSON-RPC is answered with its error code, and requests
before initialize are answered -32002 (the LSP's ServerNotInitialized)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from typing import Any, BinaryIO

from lsprotocol.types import ResponseError
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer

MAX_MESSAGE = 64 << 20  # bytes: far beyond any editor's message, far below what ends the process
MAX_LINE = 8192  # a header line longer than this is junk; lines are read in pieces of it
TAIL = 64  # bytes of a cut line kept for the next piece: a header may straddle the cut
HEADER = re.compile(rb"Content-Length:[ \t]*([0-9]+)[ \t]*\r?\n\Z", re.IGNORECASE)
PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS, NOT_INITIALIZED = -32700, -32600, -32602, -32002


class _OneLine(logging.Filter):
    """pygls logs a message it cannot structure with the whole traceback: the log keeps its first line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and str(record.msg).startswith("Unable to deserialize"):
            record.msg, record.args = str(record.msg).split("\n", 1)[0], ()
        return True


class FrameReader:
    """Message bodies from a byte stream framed by Content-Length headers; blocking (run it off the loop)."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self._carry = b""

    def next(self) -> bytes | str | None:
        """The next body; or a framing problem to answer (a str), the stream then resynced at the next header;
        or None at the end of the input."""
        length: int | None = None
        junk = False  # something other than a header came before this one
        while True:
            line = self._line()
            if line is None:
                return None
            if length is None:
                if match := HEADER.search(line):
                    digits = match[1]
                    length = int(digits) if len(digits) <= 12 else MAX_MESSAGE + 1
                elif line.strip():
                    junk = True
                elif junk:
                    return "a message without a valid Content-Length header: skipped"
            elif not line.strip():
                break  # the end of the headers (any other header, Content-Type, is not needed)
        if length > MAX_MESSAGE:
            return f"a message of {length} bytes is over the {MAX_MESSAGE >> 20} MiB limit: skipped"
        body = self.stream.read(length)
        return body if len(body) == length else None

    def _line(self) -> bytes | None:
        piece = self.stream.readline(MAX_LINE)
        if not piece:
            return None
        line, self._carry = self._carry + piece, b""
        if not piece.endswith(b"\n"):
            self._carry = line[-TAIL:]
        return line


class Gate:
    """What of each body reaches pygls: JSON-RPC messages, requests only once initialize came."""

    def __init__(self, server: LanguageServer) -> None:
        self.server = server
        self.initialized = False

    def deliver(self, body: bytes | str) -> None:
        if isinstance(body, str):
            self._answer(None, INVALID_REQUEST, body)
            return
        try:
            raw = json.loads(body)
        except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, or nested past the parser's depth
            self._answer(None, PARSE_ERROR, f"the message is not JSON: {str(exc)[:200]}")
            return
        if not isinstance(raw, dict) or raw.get("jsonrpc") != "2.0":
            self._answer(_id(raw), INVALID_REQUEST, "not a JSON-RPC 2.0 message")
            return
        method, request = raw.get("method"), "id" in raw and "method" in raw
        if not self.initialized and method not in ("initialize", "exit"):
            if request:
                self._answer(_id(raw), NOT_INITIALIZED, "the server is not initialized: send initialize first")
            return  # a notification before initialize is dropped, as the LSP says
        try:
            message = json.loads(body, object_hook=self.server.protocol.structure_message)
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # the message's fields are not what its method takes
            if request:
                self._answer(_id(raw), INVALID_PARAMS, f"{method}: {type(exc).__name__}: {str(exc)[:200]}")
            return
        if method == "initialize" and request:
            self.initialized = True
        self.server.protocol.handle_message(message)

    def _answer(self, msg_id: Any, code: int, text: str) -> None:
        self.server.protocol._send_response(msg_id, None, ResponseError(code=code, message=f"stepscope: {text}"))


def _id(raw: Any) -> int | str | None:
    value = raw.get("id") if isinstance(raw, dict) else None
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


def serve_io(server: LanguageServer, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """pygls's LanguageServer.start_io with this reading: until the input ends or the client says exit."""
    logging.getLogger("pygls.protocol.json_rpc").addFilter(_OneLine())
    server._stop_event = stop = threading.Event()  # what pygls's shutdown sets
    server.protocol.set_writer(StdoutWriter(stdout))
    reader, gate = FrameReader(stdin), Gate(server)

    async def loop() -> None:
        running = asyncio.get_running_loop()
        while not stop.is_set():
            body = await running.run_in_executor(server.thread_pool, reader.next)
            if body is None:
                break
            gate.deliver(body)

    try:
        asyncio.run(loop())
    except (BrokenPipeError, KeyboardInterrupt, SystemExit):
        pass  # the client went away, or said exit
    finally:
        server.shutdown()
