"""The kept fixes written as code: `suggested.patch`, a unified diff against the user's files (never the files
themselves), with the commands that apply it.

Each fix is placed where the trials saw the program do the thing it changes (its `write` in tune/fixes/): the
DataLoader call that built the loader, the zero_grad and optimizer calls, the batch copies, the statement that
calls the model, the statement that built it; under a training framework, the framework's own setting in the
user's configuration call (tune/framework_edit.py).
"""

from __future__ import annotations

import difflib
import os
import shlex
from pathlib import Path
from typing import Any

from stepscope.tune.edits import FileEdits, Patchwork
from stepscope.tune.fixes import FIXES
from stepscope.tune.framework_edit import framework_write
from stepscope.tune.wire import Settings


def suggest(applied_params: dict[str, dict[str, Any]], applied: list[str], settings: Settings, device_kind: str,
            header: list[str], patch_file: str = "suggested.patch") -> tuple[str | None, list[str], list[str]]:
    """The unified diff (None when nothing could be placed), the fixes it could not place, and the commands that
    apply it from the working folder once it is written at `patch_file`."""
    work = Patchwork()
    for fix_id in applied:
        fix, params = FIXES.get(fix_id), applied_params.get(fix_id, {})
        placed = framework_write(work, fix_id, params, settings, device_kind)  # under a framework: its setting
        if placed is None:
            placed = fix is not None and fix.write is not None and fix.write(work, params, settings, device_kind)
        if not placed:
            work.unplaced.append(fix_id)
    changed = [edits for edits in work.files.values() if _diff(edits, os.sep)]
    base = patch_base([edits.path for edits in changed])
    body = "".join(d for d in (_diff(edits, base) for edits in changed) if d)
    if not body:
        return None, work.unplaced, []
    commands = apply_commands(base, patch_file)
    how = f"apply in {os.getcwd()} (the folder the tune ran in) with: `{'` or `'.join(commands)}`"
    notes = [*header, how, *(f"not placed automatically: {f}" for f in work.unplaced)]
    return "".join(f"# {line}\n" for line in notes) + body, work.unplaced, commands


def patch_base(paths: list[str]) -> str:
    """The folder the patch's names are relative to: the working folder when every file is under it, else the
    files' deepest common folder (git apply and GNU patch refuse absolute names and `..`)."""
    cwd = os.getcwd()
    full = [os.path.abspath(p) for p in paths]
    if all(_under(p, cwd) for p in full):
        return cwd
    return os.path.commonpath([os.path.dirname(p) for p in full])


def apply_commands(base: str, patch_file: str) -> list[str]:
    """Commands that each apply a patch whose names are `a/`/`b/` + the path relative to `base`, typed in the
    working folder: run there when `base` is the working folder, else pointed at `base`."""
    shown = os.path.relpath(patch_file) if _under(os.path.abspath(patch_file), os.getcwd()) else patch_file
    if base == os.getcwd():
        return [f"git apply {shlex.quote(shown)}", f"patch -p1 < {shlex.quote(shown)}"]
    full = shlex.quote(os.path.abspath(patch_file))  # git -C resolves the patch's path in `base`
    return [f"git -C {shlex.quote(base)} apply {full}", f"patch -p1 -d {shlex.quote(base)} < {shlex.quote(shown)}"]


def _under(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def _diff(edits: FileEdits, base: str) -> str:
    source = edits.source
    for (start, end), (_, text) in sorted(edits.spans.items(), key=lambda kv: (kv[0], kv[1][0]), reverse=True):
        source = source[:start] + text + source[end:]
    lines = source.splitlines(keepends=True)
    # Line edits from the bottom up, so the line numbers above each one stay true.
    ops = [(last, 1, 0, first, header) for first, (last, header) in edits.wraps.items()]
    ops += [(after, 2, i, indent, code) for i, (after, indent, code) in enumerate(edits.inserts)]
    for line, kind, _, a, b in sorted(ops, key=lambda op: op[:3], reverse=True):  # inserts keep their order
        if kind == 1:
            first, last = a, line
            body = ["    " + x if x.strip() else x for x in lines[first - 1:last]]
            lines[first - 1:last] = [_indent(lines[first - 1]) + b + "\n", *body]
        else:
            lines.insert(line, a + b + "\n")
    original = edits.source.splitlines(keepends=True)
    if lines == original:
        return ""
    name = Path(os.path.relpath(os.path.abspath(edits.path), base)).as_posix()
    return "".join(difflib.unified_diff(original, lines, fromfile=f"a/{name}", tofile=f"b/{name}"))


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]
