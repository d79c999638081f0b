"""`stepscope watch --page`: the session's view on a self-contained page served on 127.0.0.1, updated over
Server-Sent Events. The standard library's ThreadingHTTPServer is enough for one user on loopback (one thread per
open page; SSE is a response that never ends) and keeps `watch` free of a server dependency."""

from __future__ import annotations

import json
import re
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from stepscope.model.batches import MAX_BATCH, at, batch_problem

if TYPE_CHECKING:
    from stepscope.live.watch import WatchSession

KEEPALIVE_S = 10.0
# A connection that sends nothing for this long is closed: a client that sends half a request (or a hundred) holds
# a thread each until then, not forever. An open page's stream only writes, each write within this time.
TIMEOUT_S = 20.0
HOST = "127.0.0.1"
BATCH_TEXT = re.compile(r"[0-9]+")  # ASCII digits only: int() would take " 5", "1_0" and other scripts' digits
# Actions must carry this header: a page from another site cannot send it without a CORS preflight we never
# answer, so it cannot start the user's program.
ACTION_HEADER = "X-Stepscope"


class _Server(ThreadingHTTPServer):
    request_queue_size = 64  # connections waiting to be accepted (the standard library's 5 drops a page's bursts)

    def __init__(self, page: PageServer, port: int, timeout_s: float) -> None:
        self.page = page
        super().__init__((HOST, port), _handler(page, timeout_s))

    def handle_error(self, request: object, client_address: tuple[str, int]) -> None:
        """What a request raised is one line under the view, never a traceback over it, never the end of watch."""
        exc = sys.exc_info()[1]
        self.page.session.note(f"page: a request from port {client_address[1]} failed: "
                               f"{type(exc).__name__}: {exc}"[:200])


class PageServer:
    def __init__(self, session: WatchSession, port: int = 0, timeout_s: float = TIMEOUT_S) -> None:
        self.session = session
        self._cond = threading.Condition()
        self._stopping = False
        self.html = resources.files("stepscope.live").joinpath("static/watch.html").read_bytes()
        self.httpd = _Server(self, port, timeout_s)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://{HOST}:{self.port}/"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True, name="stepscope-page")
        session.listen(self._notify)

    def start(self) -> PageServer:
        self._thread.start()
        return self

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    def _notify(self, version: int) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_for_change(self, seen: int) -> bool:
        """Block until the view's version passes `seen` (True) or the keep-alive interval ends (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._stopping or self.session.version > seen, KEEPALIVE_S) \
                and not self._stopping

    def prediction(self, batch: int) -> dict[str, Any]:
        model = self.session.model
        if model is None:
            return {"error": "no result yet"}
        p = at(model, batch)  # the Report's row, else its batch model's
        return {"batch_size": p.batch_size, "step_us": p.step_us, "samples_per_s": p.samples_per_s,
                "peak_bytes": p.peak_bytes, "fits": p.fits, "basis": model.basis}


def _handler(server: PageServer, timeout_s: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = timeout_s  # the socket's: reads and writes that wait longer end the connection

        def log_message(self, format: str, *args: Any) -> None:  # the terminal belongs to the watch view
            pass

        def _host_ok(self) -> bool:  # a name that resolves to 127.0.0.1 from elsewhere (DNS rebinding) is refused
            if self.headers.get("Host") in (f"{HOST}:{server.port}", f"localhost:{server.port}"):
                return True
            self._send(HTTPStatus.FORBIDDEN, b"forbidden host", "text/plain")
            return False

        def do_GET(self) -> None:
            if not self._host_ok():
                return
            url = urlsplit(self.path)
            if url.path == "/":
                self._send(HTTPStatus.OK, server.html, "text/html; charset=utf-8")
            elif url.path == "/state":
                self._json(server.session.snapshot())
            elif url.path == "/predict":
                batch = _batch_arg(url.query)
                if isinstance(batch, str):
                    self._json({"error": batch}, HTTPStatus.BAD_REQUEST)
                else:
                    self._json(server.prediction(batch))
            elif url.path == "/events":
                self._events()
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")

        def do_POST(self) -> None:
            if not self._host_ok():
                return
            if self.headers.get(ACTION_HEADER) != "1":
                self._send(HTTPStatus.FORBIDDEN, b"missing header", "text/plain")
                return
            url = urlsplit(self.path)
            if url.path == "/measure":
                batch = _batch_arg(url.query)
                if isinstance(batch, str):
                    self._json({"error": batch, "batch_size": None}, HTTPStatus.BAD_REQUEST)
                else:
                    self._json({"error": server.session.measure(batch), "batch_size": batch})
            elif url.path == "/pin":
                server.session.pin()
                self._json({"error": None})
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")

        def _events(self) -> None:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            seen = -1
            try:
                while not server._stopping:
                    if server.session.version > seen:
                        view = server.session.snapshot()
                        seen = view["version"]
                        self.wfile.write(b"data: " + json.dumps(view).encode() + b"\n\n")
                    else:
                        self.wfile.write(b": keep-alive\n\n")
                    self.wfile.flush()
                    server.wait_for_change(seen)
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                self.close_connection = True  # the page was closed, or stopped reading

        def _json(self, value: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
            self._send(status, json.dumps(value).encode(), "application/json")

        def _send(self, status: HTTPStatus, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

    return Handler


def _batch_arg(query: str) -> int | str:
    """The query's batch size, or why there is none: a reason for the 400 answer."""
    try:
        values = parse_qs(query, strict_parsing=False, max_num_fields=20).get("batch", [])
    except ValueError:
        return "too many query fields"
    if len(values) != 1:
        return "give ?batch=N once, N a whole number of 1 or more"
    text = values[0]
    if not BATCH_TEXT.fullmatch(text):
        return f"batch {text[:20]!r}: give a whole number of 1 or more"
    batch = int(text) if len(text) <= 12 else MAX_BATCH + 1  # a long one is out of range, whatever its digits
    return batch_problem(batch) or batch
