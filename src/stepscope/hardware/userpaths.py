"""The user's own places (HOME, the config and cache folders) as stepscope looks at them: one that cannot be
entered or read (`docker run --user 1000` on an image whose HOME is /root, sudo keeping HOME) is skipped and said
in the next report's notes, never a traceback: the shipped table and measurements serve instead."""

from __future__ import annotations

import os
from pathlib import Path

_skipped: dict[str, str] = {}  # path -> note, taken by the next report (take_notes)


def user_folder(env: str, under_home: str) -> Path | None:
    """$env, else HOME/under_home; None (said) when there is no HOME to find."""
    explicit = os.environ.get(env)
    if explicit:
        return Path(explicit).expanduser()
    try:
        return Path.home() / under_home
    except RuntimeError as exc:  # no HOME and no passwd entry for this user
        _skipped["~"] = f"no home folder ({exc}): the user's hardware file and measurements were not looked for"
        return None


def there(path: Path | None, what: str) -> bool:
    """Whether `path` is there to read; a place that cannot be looked into counts as absent, with a note."""
    if path is None:
        return False
    try:
        return path.exists()
    except OSError as exc:
        skip(path, what, exc)
        return False


def skip(path: Path, what: str, exc: OSError) -> None:
    reason = (exc.strerror or str(exc)).lower()
    _skipped[str(path)] = f"{path}: cannot be read ({reason}); {what} skipped"


def take_notes() -> list[str]:
    """The places skipped since the last call, as notes (each once)."""
    notes = list(_skipped.values())
    _skipped.clear()
    return notes
