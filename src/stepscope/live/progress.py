"""Work-done progress ($/progress) for each capture the language server runs: the token is created with the client
first (window/workDoneProgress/create), and what comes before the client's answer waits for it, in order."""

from __future__ import annotations

from typing import Any

from lsprotocol import types as t


class ProgressReporter:
    """begin/report/end by run id; runs at or below `floor` (made stale by a newer save) say nothing more."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.floor = 0
        self._tokens: dict[int, str] = {}  # open progress: run id -> token
        self._waiting: dict[int, list[Any]] = {}  # run id -> values held until the client has created the token
        self._serial = 0  # tokens stay unique when a new engine numbers its runs from 1 again

    def _supported(self) -> bool:
        window = self.server.client_capabilities.window
        return bool(window and window.work_done_progress)

    def begin(self, run_id: int, title: str, message: str) -> None:
        if run_id <= self.floor or run_id in self._tokens or not self._supported():
            return
        self._serial += 1
        token = self._tokens[run_id] = f"stepscope-{self._serial}"
        self._waiting[run_id] = [t.WorkDoneProgressBegin(title=title, message=message, cancellable=False)]

        def created(*_: Any) -> None:
            for value in self._waiting.pop(run_id, []):
                self._send(token, value)

        self.server.window_work_done_progress_create(t.WorkDoneProgressCreateParams(token=token), created)

    def report(self, run_id: int, message: str) -> None:
        self._push(run_id, t.WorkDoneProgressReport(message=message))

    def end(self, run_id: int, message: str) -> None:
        self._push(run_id, t.WorkDoneProgressEnd(message=message))
        self._tokens.pop(run_id, None)

    def cancel_all(self, message: str, through: int) -> None:
        """End every open progress; runs up to `through` say nothing more."""
        for run_id in list(self._tokens):
            self.end(run_id, message)
        self.floor = max(self.floor, through)

    def reset(self, message: str) -> None:
        """A new engine, whose runs are numbered from 1 again."""
        self.cancel_all(message, 0)
        self.floor = 0

    def _push(self, run_id: int, value: Any) -> None:
        token = self._tokens.get(run_id)
        if token is None:
            return
        if run_id in self._waiting:
            self._waiting[run_id].append(value)
        else:
            self._send(token, value)

    def _send(self, token: str, value: Any) -> None:
        self.server.protocol.notify(t.PROGRESS, t.ProgressParams(token=token, value=value))
