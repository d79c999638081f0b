"""The kept fixes written as code: a unified diff against the user's files (never the files themselves).

Each fix is placed where the trials saw the program do the thing it changes: the DataLoader call that built the
loader, the zero_grad and optimizer calls, the batch copies, the statement that calls the model, the statement
that built it. The sites come from the patched constructors' call sites; the code is found there with `ast`.
"""

from __future__ import annotations

import ast
import difflib
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscope.tune.wire import CallSite, Settings

LOADER_KEYWORDS = {"dataloader_workers": ("num_workers", lambda p: str(p.get("num_workers", 4))),
                   "pin_memory": ("pin_memory", lambda p: "True"),
                   "persistent_workers": ("persistent_workers", lambda p: "True")}
MARK = "  # stepscope tune"


@dataclass
class FileEdits:
    path: str
    source: str
    tree: ast.Module
    keywords: dict[tuple[int, int], tuple[int, str]] = field(default_factory=dict)  # (start, end) -> (order, text)
    wraps: dict[int, tuple[int, str]] = field(default_factory=dict)  # first line -> (last line, `with` header)
    inserts: list[tuple[int, str, str]] = field(default_factory=list)  # (after line, indent, code)

    def offset(self, line: int, col: int) -> int:
        lines = self.source.splitlines(keepends=True)
        # ast columns count UTF-8 bytes
        return sum(len(x) for x in lines[: line - 1]) + len(lines[line - 1].encode()[:col].decode(errors="replace"))


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


def suggest(applied_params: dict[str, dict[str, Any]], applied: list[str], settings: Settings, device_kind: str,
            header: list[str], patch_file: str = "suggested.patch") -> tuple[str | None, list[str], list[str]]:
    """The unified diff (None when nothing could be placed), the fixes it could not place, in words, and the
    commands that apply it from the working folder once it is written at `patch_file`."""
    work = Patchwork()
    for fix in applied:
        params = applied_params.get(fix, {})
        if not _place(work, fix, params, settings, device_kind):
            work.unplaced.append(fix)
    changed = [edits for edits in work.files.values() if _diff(edits, os.sep)]
    base = patch_base([edits.path for edits in changed])
    diffs = [_diff(edits, base) for edits in changed]
    body = "".join(d for d in diffs if d)
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


def _place(work: Patchwork, fix: str, params: dict[str, Any], settings: Settings, device_kind: str) -> bool:
    if fix in LOADER_KEYWORDS:
        name, value = LOADER_KEYWORDS[fix]
        return _keyword_at(work, settings.loaders, name, value(params), _named("DataLoader"))
    if fix == "larger_batch":
        return _keyword_at(work, settings.loaders, "batch_size", None, _named("DataLoader"),
                           scale=int(params.get("factor", 2)))
    if fix == "set_to_none":
        return _keyword_at(work, [s for s in settings.zero_grad if s.value is False], "set_to_none", "True",
                           _named("zero_grad"))
    if fix == "fused_optimizer":
        mode = params.get("mode", "fused")
        return _keyword_at(work, settings.optimizers, mode, "True", _named(*{o.cls for o in settings.optimizers}))
    if fix == "non_blocking_copy":
        return _keyword_at(work, settings.copies, "non_blocking", "True", _named("to", "cuda"), every=True)
    if fix in ("tf32", "cudnn_benchmark"):
        return _after_imports(work, settings, fix)
    if fix == "amp":
        return _wrap_forward(work, settings, params, device_kind)
    if fix in ("channels_last", "torch_compile", "cuda_graphs"):
        return _after_model(work, settings, fix)
    return False


def _named(*names: str) -> Any:
    def match(call: ast.Call) -> bool:
        f = call.func
        return (isinstance(f, ast.Name) and f.id in names) or (isinstance(f, ast.Attribute) and f.attr in names)

    return match


def _calls_at(edits: FileEdits, line: int, match: Any) -> list[ast.Call]:
    found = [n for n in ast.walk(edits.tree) if isinstance(n, ast.Call) and match(n)
             and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return sorted(found, key=lambda n: ((n.end_lineno or n.lineno) - n.lineno, n.col_offset))


def _keyword_at(work: Patchwork, sites: list[Any], name: str, value: str | None, match: Any, *, scale: int = 1,
                every: bool = False) -> bool:
    placed = False
    for site in sites:
        edits = work.file(site.file)
        if edits is None or site.line is None:
            continue
        calls = _calls_at(edits, site.line, match)
        for call in calls if every else calls[:1]:
            placed |= _set_keyword(edits, call, name, value, scale)
    return placed


def _set_keyword(edits: FileEdits, call: ast.Call, name: str, value: str | None, scale: int) -> bool:
    """name=value in the call: its value replaced if the keyword is there, else added after the last argument."""
    kw = next((k for k in call.keywords if k.arg == name), None)
    if kw is not None:
        start = edits.offset(kw.value.lineno, kw.value.col_offset)
        end = edits.offset(kw.value.end_lineno or kw.value.lineno, kw.value.end_col_offset or 0)
        old = edits.source[start:end]
        new = value if value is not None else _scaled(old, scale)
        if old != new:
            edits.keywords[(start, end)] = (0, new)
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
    edits.keywords[(at, at)] = (len(edits.keywords) + 1, text)
    return True


def _scaled(expr: str, k: int) -> str:
    if expr.isdigit():
        return str(int(expr) * k)
    try:
        atom = isinstance(ast.parse(expr, mode="eval").body, (ast.Name, ast.Attribute, ast.Subscript, ast.Call))
    except SyntaxError:
        atom = False
    return f"{k} * {expr}" if atom else f"{k} * ({expr})"


def _statement_at(edits: FileEdits, line: int) -> ast.stmt | None:
    """The innermost simple statement spanning `line`."""
    best = None
    for node in ast.walk(edits.tree):
        simple = isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return))
        if simple and node.lineno <= line <= (node.end_lineno or node.lineno) and (
                best is None or node.lineno >= best.lineno):
            best = node
    return best


def _wrap_forward(work: Patchwork, settings: Settings, params: dict[str, Any], device_kind: str) -> bool:
    site: CallSite | None = settings.model_site
    edits = work.file(site.file) if site else None
    stmt = _statement_at(edits, site.line) if edits and site and site.line else None
    if edits is None or stmt is None:
        return False
    dtype = params.get("dtype", "bfloat16")
    header = f'with torch.autocast("{device_kind}", dtype=torch.{dtype}):{MARK}: amp'
    if dtype == "float16":
        header += " (float16: scale the loss with torch.amp.GradScaler)"
    edits.wraps[stmt.lineno] = (stmt.end_lineno or stmt.lineno, header)
    return True


def _after_model(work: Patchwork, settings: Settings, fix: str) -> bool:
    model = settings.model
    site = settings.model_site
    edits = work.file(site.file) if site else None
    if model is None or edits is None:
        return False
    built = [(n, _target(n)) for n in ast.walk(edits.tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
             and n.value is not None and _target(n)
             and any(isinstance(c, ast.Call) and _named(model.cls)(c) for c in ast.walk(n.value))]
    if not built:
        return False
    stmt, var = built[0]
    code = {"channels_last": f"{var} = {var}.to(memory_format=torch.channels_last){MARK}: channels_last",
            "torch_compile": f"{var}.compile(){MARK}: torch_compile",
            "cuda_graphs": f'{var}.compile(mode="reduce-overhead"){MARK}: cuda_graphs'}[fix]
    if fix == "cuda_graphs":  # it is torch_compile with CUDA graphs: one compile call
        edits.inserts = [x for x in edits.inserts if not x[2].endswith(": torch_compile")]
    elif fix == "torch_compile" and any(x[2].endswith(": cuda_graphs") for x in edits.inserts):
        return True
    edits.inserts.append((stmt.end_lineno or stmt.lineno, _indent(edits.source.splitlines()[stmt.lineno - 1]), code))
    return True


def _target(node: ast.Assign | ast.AnnAssign) -> str:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return targets[0].id if len(targets) == 1 and isinstance(targets[0], ast.Name) else ""


def _after_imports(work: Patchwork, settings: Settings, fix: str) -> bool:
    site = settings.model_site or (settings.loaders[0] if settings.loaders else None)
    edits = work.file(site.file) if site else None
    if edits is None:
        return False
    imports = [n for n in edits.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    line = (imports[-1].end_lineno or imports[-1].lineno) if imports else 0
    code = {"tf32": f"torch.backends.cuda.matmul.allow_tf32 = True{MARK}: tf32",
            "cudnn_benchmark": f"torch.backends.cudnn.benchmark = True{MARK}: cudnn_benchmark"}[fix]
    edits.inserts.append((line, "", code))
    return True


def _diff(edits: FileEdits, base: str) -> str:
    source = edits.source
    for (start, end), (_, text) in sorted(edits.keywords.items(), key=lambda kv: (kv[0], kv[1][0]), reverse=True):
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
