"""Which framework runs the step, and where the user configures it.

At a step boundary (or the model's first forward) the stack holds the framework's loop: frames of `transformers`,
`lightning` or `accelerate` between the hook and the user's `trainer.train()`. The configuration call
(`TrainingArguments(`, `Trainer(`, `Accelerator(`) is then found with `ast` in the user's files on that stack, the
innermost file first: the last such call before the user's call into the framework's loop in the same function
(`args = TrainingArguments(...)` above `trainer.train()`), else the first in the file; the files are read, never
changed.
"""

from __future__ import annotations

import ast
import functools
import linecache
import os
from dataclasses import dataclass
from types import FrameType
from typing import Any

from stepscope.attribution.usercode import UserCode, installed_name
from stepscope.frameworks import FRAMEWORKS, Framework


@dataclass(frozen=True)
class Site:
    file: str  # as the code object names it: a path that opens
    line: int
    function: str
    code: str

    def location(self, user: UserCode | None = None) -> dict[str, Any]:
        """The report's location: the file as stepscope shows user code (relative to the working folder)."""
        shown = (user or UserCode()).display(self.file) or self.file
        return {"file": shown, "line": self.line, "function": self.function, "code": self.code}


@dataclass(frozen=True)
class Seen:
    name: str  # a FRAMEWORKS key
    package: str  # the package its frames came from ("lightning" or "pytorch_lightning")
    config_name: str | None  # the configuration call as the user wrote it ("TrainingArguments")
    config: Site | None  # that call
    call: Site | None  # the user's line that runs the framework's loop (trainer.train(), trainer.fit(...))
    loader: Site | None  # accelerate: the user's DataLoader( call (the loader stepped is the prepared copy)


_BY_PACKAGE = {p: fw for fw in FRAMEWORKS.values() for p in fw.packages}


def _package(filename: str) -> str | None:
    installed = installed_name(os.path.realpath(filename)) if not filename.startswith("<") else None
    top = installed.split(os.sep, 1)[0] if installed else None
    return top if top in _BY_PACKAGE else None


def detect(frame: FrameType | None, user: UserCode | None = None) -> Seen | None:
    """The framework whose frames are on the stack from `frame` outwards (the Trainer and Lightning before
    accelerate, whose wrappers they run through), or None for a plain loop."""
    user = user or UserCode()
    packages: dict[str, str] = {}  # framework -> the package seen
    calls: dict[str, Site] = {}  # framework -> the first user frame outside its frames
    files: list[str] = []
    inside = False
    while frame is not None:
        filename = frame.f_code.co_filename
        package = _package(filename)
        if package is not None:
            packages.setdefault(_BY_PACKAGE[package].name, package)
            inside = True
        elif user.display(filename) is not None:
            if filename not in files:
                files.append(filename)
            if inside:
                for name in packages:
                    calls.setdefault(name, _frame_site(frame))
            inside = False
        frame = frame.f_back
    name = next((n for n in FRAMEWORKS if n in packages), None)
    if name is None:
        return None
    fw = FRAMEWORKS[name]
    config = _config_before(calls.get(name), fw.config) or first_call(files, fw.config)
    loader = first_call(files, ("DataLoader",)) if name == "accelerate" else None
    return Seen(name=name, package=packages[name], config_name=_called_name(config, fw), config=config,
                call=calls.get(name), loader=loader)


def _frame_site(frame: FrameType) -> Site:
    code = frame.f_code
    return Site(file=code.co_filename, line=frame.f_lineno, function=getattr(code, "co_qualname", code.co_name),
                code=linecache.getline(code.co_filename, frame.f_lineno).strip())


def _called_name(site: Site | None, fw: Framework) -> str | None:
    if site is None:
        return None
    return next((n for n in fw.config if n + "(" in site.code), fw.config[0])


def _config_before(call: Site | None, names: tuple[str, ...]) -> Site | None:
    """The last configuration call above the call into the loop, in the same function (a file may build several)."""
    if call is None:
        return None
    function = call.function.rsplit(".", 1)[-1]
    before = [s for s in _calls(call.file, names) if s.function == function and s.line <= call.line]
    return before[-1] if before else None


def first_call(files: list[str], names: tuple[str, ...]) -> Site | None:
    """The first call of a function or class by one of `names` in the first of `files` that has one."""
    for file in files:
        found = _calls(file, names)
        if found:
            return found[0]
    return None


@functools.lru_cache(maxsize=64)
def _calls(file: str, names: tuple[str, ...]) -> tuple[Site, ...]:
    try:
        with open(file, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return ()
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) in names:
            inner = [d for d in functions if d.lineno <= node.lineno <= (d.end_lineno or d.lineno)]
            function = max(inner, key=lambda d: d.lineno).name if inner else "<module>"
            found.append(Site(file=file, line=node.lineno, function=function,
                              code=linecache.getline(file, node.lineno).strip()))
    return tuple(sorted(found, key=lambda s: s.line))


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None
