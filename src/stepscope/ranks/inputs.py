"""The rank files a user points at: files, folders of traces, globs (quoted, for the shell not to expand them),
and list files (`@ranks.txt`, or a .txt/.list file: one path or glob per line, relative to the list's folder;
blank lines and # comments skipped) for traces on a mounted object store."""

from __future__ import annotations

import glob
from collections.abc import Iterable
from pathlib import Path

from stepscope.errors import StepscopeError
from stepscope.trace.load import expand

LIST_SUFFIXES = (".txt", ".list", ".lst")
GLOB_CHARS = "*?["


def rank_files(paths: Iterable[str | Path]) -> list[Path]:
    """Every file to analyse, in the order given (folders and globs sorted by name), duplicates dropped."""
    files: list[Path] = []
    for raw in paths:
        try:
            files.extend(_one(str(raw), None, allow_list=True))
        except OSError as exc:  # a name the system refuses (too long, ...): say so, not a traceback
            raise StepscopeError(f"{_shown(str(raw))}: not a usable path ({exc.strerror or exc})") from None
    if not files:
        raise StepscopeError("no trace given")
    return list(dict.fromkeys(files))


def _one(raw: str, base: Path | None, *, allow_list: bool) -> list[Path]:
    """One entry: relative to the working folder (base None) or to the list file's folder."""
    if raw.startswith("@") and allow_list:
        return _list_file(Path(raw[1:]))
    path = Path(raw) if base is None else base / raw
    if path.is_file() and path.suffix in LIST_SUFFIXES and allow_list:
        return _list_file(path)
    if path.exists():
        return expand([path])
    if any(c in raw for c in GLOB_CHARS):
        pattern = str(path)
        matches = sorted(Path(p) for p in glob.glob(pattern, recursive=True))
        files = [m for m in matches if m.is_file()]
        files += [f for m in matches if m.is_dir() for f in expand([m])]
        if not files:
            raise StepscopeError(f"{raw}: no file matches this pattern")
        return files
    raise StepscopeError(f"{path}: no such file or folder")


def _list_file(path: Path) -> list[Path]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StepscopeError(f"{path}: cannot read the list of traces ({exc.strerror or exc})") from None
    try:  # a trace given a list's name (a gzip file called .txt) is not read line by line as paths
        text = data.decode("utf-8")
        if "\0" in text or data[:2] == b"\x1f\x8b":
            raise ValueError
    except ValueError:
        raise StepscopeError(f"{path}: not a list of traces (binary content); a trace file is named .json, .json.gz, "
                             ".sqlite or .nsys-rep") from None
    if _is_json(text):  # a JSON trace under a list's name: the reader goes by content, so read it as a trace
        return [path]
    lines = [line.strip() for line in text.splitlines()]
    entries = [(n, line) for n, line in enumerate(lines, 1) if line and not line.startswith("#")]
    if not entries:
        raise StepscopeError(f"{path}: the list of traces is empty")
    files: list[Path] = []
    for n, entry in entries:
        try:
            files.extend(_one(entry, path.parent, allow_list=False))
        except OSError as exc:
            raise StepscopeError(f"{path}: line {n} is not a usable path ({exc.strerror or exc}): "
                                 f"{_shown(entry)}") from None
        except StepscopeError as exc:
            raise StepscopeError(f"{path}: line {n}: {exc.message}", hint=exc.hint) from None
    return files


def _is_json(text: str) -> bool:
    """A JSON object, or an array of objects: no list of paths starts so (a glob starts `[0-9]`, not `[{`)."""
    head = text.lstrip()[:64]
    return head.startswith("{") or (head.startswith("[") and head[1:].lstrip()[:1] in ("{", "]", ""))


def _shown(text: str) -> str:
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text):,} characters)"
