"""The one error type core code raises; only the CLI prints it."""

from __future__ import annotations


class StepscopeError(Exception):
    """A problem the user can act on: printed as one line (plus a hint), never as a traceback."""

    def __init__(self, message: str, hint: str | None = None, exit_code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message
