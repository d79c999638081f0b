"""Edits of the user's source, found with `ast` at the sites the trials recorded, kept apart from the files (the
suggested patch is a diff: the files themselves are never written). Each fix's `write` (tune/fixes/) uses these:
a keyword set in a call, a statement wrapped in a `with`, a line inserted, a span of text replaced."""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscope.tune.wire import CallSite, Settings

MARK = "  # stepscope tune"
CallMatch = Callable[[ast.Call], bool]


def mark(fix_id: str) -> str:
    """The comment that ends every line a fix adds."""
    return f"{MARK}: {fix_id}"


@dataclass
class FileEdits:
    path: str
    source: str
    tree: ast.Module
    spans: dict[tuple[int, int], tuple[int, str]] = field(default_factory=dict)  # (start, end) -> (order, text)
    wraps: dict[int, tuple[int, str]] = field(default_factory=dict)  # first line -> (last line, `with` header)
    inserts: list[tuple[int, str, str]] = field(default_factory=list)  # (after line, indent, code)

    def offset(self, line: int, col: int) -> int:
        lines = self.source.splitlines(keepends=True)
        # ast columns count UTF-8 bytes
        return sum(len(x) for x in lines[: line - 1]) + len(lines[line - 1].encode()[:col].decode(errors="replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        """Where a node's text starts and ends in the source."""
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]
        return start, end

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source[start:end]

    def replace(self, start: int, end: int, text: str) -> None:
        self.spans[(start, end)] = (len(self.spans) + 1, text)

    def insert_after(self, line: int, code: str, indent_like: int | None = None) -> None:
        """`code` on a new line after `line`, indented as line `indent_like` (top level when None)."""
        indent = _indent(self.source.splitlines()[indent_like - 1]) if indent_like else ""
        self.inserts.append((line, indent, code))


@dataclass
class Patchwork:
    files: dict[str, FileEdits] = field(default_factory=dict)
    unplaced: list[str] = field(default_factory=list)

    def file(self, path: str | None) -> FileEdits | None:
        if path is None or not os.path.isfile(path):
            return None
        if path not in self.files:
            try:
                source = Path(path).read_text(encoding="utf-8")
                self.files[path] = FileEdits(path, source, ast.parse(source))
            except (OSError, SyntaxError, UnicodeDecodeError):
                return None
        return self.files[path]


def named(*names: str) -> CallMatch:
    """Calls of a function or method by one of these names."""
    def match(call: ast.Call) -> bool:
        f = call.func
        return (isinstance(f, ast.Name) and f.id in names) or (isinstance(f, ast.Attribute) and f.attr in names)

    return match


def calls_at(edits: FileEdits, line: int, match: CallMatch) -> list[ast.Call]:
    """Matching calls that span `line`, innermost first."""
    found = [n for n in ast.walk(edits.tree) if isinstance(n, ast.Call) and match(n)
             and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return sorted(found, key=lambda n: ((n.end_lineno or n.lineno) - n.lineno, n.col_offset))


def keyword_at(work: Patchwork, sites: list[Any], name: str, value: str | None, match: CallMatch, *,
               scale: int = 1, every: bool = False, comment: str = "", present_only: bool = False) -> bool:
    """name=value in the call at each site (every matching call on the line with `every`); value None: the
    existing value multiplied by `scale`; `present_only`: only where the call already passes `name`. `comment` goes
    at the end of the line the keyword is on."""
    placed = False
    for site in sites:
        edits = work.file(site.file)
        if edits is None or site.line is None:
            continue
        calls = calls_at(edits, site.line, match)
        for call in calls if every else calls[:1]:
            if present_only and not any(k.arg == name for k in call.keywords):
                continue
            if _set_keyword(edits, call, name, value, scale):
                placed = True
                if comment:
                    _comment_line(edits, call, name, comment)
    return placed


def _set_keyword(edits: FileEdits, call: ast.Call, name: str, value: str | None, scale: int) -> bool:
    """name=value in the call: its value replaced if the keyword is there, else added after the last argument."""
    kw = next((k for k in call.keywords if k.arg == name), None)
    if kw is not None:
        start, end = edits.span(kw.value)
        old = edits.source[start:end]
        new = value if value is not None else scaled(old, scale)
        if old != new:
            edits.spans[(start, end)] = (0, new)
        return True
    if value is None:
        return False  # a batch size left to the default: nothing to scale in the text
    args = [*call.args, *call.keywords]
    if args:
        last = max(args, key=lambda a: (a.end_lineno or 0, a.end_col_offset or 0))
        at = edits.offset(last.end_lineno or last.lineno, last.end_col_offset or 0)
        text = f", {name}={value}"
    else:
        at = edits.offset(call.end_lineno or call.lineno, (call.end_col_offset or 1) - 1)
        text = f"{name}={value}"
    edits.replace(at, at, text)
    return True


def _comment_line(edits: FileEdits, call: ast.Call, name: str, comment: str) -> None:
    """A comment at the end of the line holding `name=` in the call (the call's last line when it is added)."""
    kw = next((k for k in call.keywords if k.arg == name), None)
    line = (kw.value.end_lineno or kw.value.lineno) if kw is not None else (call.end_lineno or call.lineno)
    end = edits.offset(line + 1, 0) - 1 if line < len(edits.source.splitlines()) else len(edits.source.rstrip("\n"))
    existing = edits.source.splitlines()[line - 1]
    if "#" not in existing:  # a line with a comment keeps it; ours would read as part of it
        edits.replace(end, end, f"  # {comment}")


def argument_at(work: Patchwork, sites: list[Any], index: int, value: str, match: CallMatch) -> bool:
    """The call's positional argument `index` replaced by `value` at each site."""
    placed = False
    for site in sites:
        edits = work.file(site.file)
        calls = calls_at(edits, site.line, match) if edits is not None and site.line else []
        if edits is not None and calls and len(calls[0].args) > index:
            start, end = edits.span(calls[0].args[index])
            if edits.source[start:end] != value:
                edits.replace(start, end, value)
            placed = True
    return placed


def scaled(expr: str, k: int) -> str:
    """The expression multiplied by k, as a person would write it."""
    if expr.isdigit():
        return str(int(expr) * k)
    try:
        atom = isinstance(ast.parse(expr, mode="eval").body, (ast.Name, ast.Attribute, ast.Subscript, ast.Call))
    except SyntaxError:
        atom = False
    return f"{k} * {expr}" if atom else f"{k} * ({expr})"


def statement_at(edits: FileEdits, line: int) -> ast.stmt | None:
    """The innermost simple statement spanning `line`."""
    best = None
    for node in ast.walk(edits.tree):
        simple = isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return))
        if simple and node.lineno <= line <= (node.end_lineno or node.lineno) and (
                best is None or node.lineno >= best.lineno):
            best = node
    return best


def wrap_statement(work: Patchwork, site: CallSite | None, header: str) -> bool:
    """The statement at `site` inside `header` (a `with ...:` line)."""
    edits = work.file(site.file) if site else None
    stmt = statement_at(edits, site.line) if edits and site and site.line else None
    if edits is None or stmt is None:
        return False
    edits.wraps[stmt.lineno] = (stmt.end_lineno or stmt.lineno, header)
    return True


def model_statement(work: Patchwork, settings: Settings) -> tuple[FileEdits, ast.stmt, str] | None:
    """The assignment that built the model (a call of its class), and the name it was given."""
    model, site = settings.model, settings.model_site
    edits = work.file(site.file) if site else None
    if model is None or edits is None:
        return None
    built = [(n, _target(n)) for n in ast.walk(edits.tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
             and n.value is not None and _target(n)
             and any(isinstance(c, ast.Call) and named(model.cls)(c) for c in ast.walk(n.value))]
    if not built:
        return None
    stmt, var = built[0]
    return edits, stmt, var


def _target(node: ast.Assign | ast.AnnAssign) -> str:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return targets[0].id if len(targets) == 1 and isinstance(targets[0], ast.Name) else ""


def after_imports(work: Patchwork, settings: Settings, code: str) -> bool:
    """`code` after the last top-level import of the file the model (else the loader) was used in."""
    site = settings.model_site or (settings.loaders[0] if settings.loaders else None)
    edits = work.file(site.file) if site else None
    if edits is None:
        return False
    imports = [n for n in edits.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    edits.insert_after((imports[-1].end_lineno or imports[-1].lineno) if imports else 0, code)
    return True


def inserted(work: Patchwork, fix_id: str) -> bool:
    """A line of this fix was inserted already."""
    return any(code.endswith(mark(fix_id)) for edits in work.files.values() for _, _, code in edits.inserts)


def withdraw(work: Patchwork, fix_id: str) -> None:
    """Take back the lines a fix inserted (another fix's line does what they did)."""
    for edits in work.files.values():
        edits.inserts = [x for x in edits.inserts if not x[2].endswith(mark(fix_id))]


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]
