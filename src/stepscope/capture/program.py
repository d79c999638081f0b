"""Run a script or module the way `python` would: its argv, `__main__`, `sys.path[0]`, exit code.

The program runs in this process (the step hooks need it there). `sys.argv`, `sys.path` and
`sys.modules['__main__']` are put back afterwards, so an in-process caller finds them as they were.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import importlib.util
import io
import os
import runpy
import sys
import tokenize
import traceback
import types
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stepscope.capture.session import StopProgram
from stepscope.capture.signals import SigtermHandler, Terminated
from stepscope.errors import StepscopeError


@dataclass(frozen=True)
class Program:
    target: str  # a script path, or a module name when `module`
    args: tuple[str, ...] = ()
    module: bool = False

    @property
    def name(self) -> str:
        """A short name for the run folder: the script's stem or the module's name."""
        if self.module:
            return self.target
        path = Path(self.target)
        return (path.name if path.is_dir() else path.stem) or "program"

    @property
    def command(self) -> list[str]:
        return [*(["-m"] if self.module else []), self.target, *self.args]


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    status: str  # "finished" | "stopped" | "exit" | "exception" | "interrupted" | "terminated"
    detail: str = ""  # one line, for the failures

    @property
    def failed(self) -> bool:
        return self.status in ("exit", "exception", "interrupted", "terminated")


def check(program: Program) -> None:
    """Refuse before anything starts, as python would, when there is nothing to run."""
    if program.module:
        saved = sys.path[:]
        _set_path0(program)
        try:
            spec = importlib.util.find_spec(program.target)  # imports the parent packages, as python -m does
        except (ImportError, ValueError) as exc:
            raise StepscopeError(f"cannot import {program.target}: {exc}", exit_code=1) from None
        finally:
            sys.path[:] = saved
        if spec is None:
            raise StepscopeError(f"No module named {program.target}", exit_code=1)
    elif not os.path.exists(program.target):
        raise StepscopeError(f"can't open file {program.target!r}: no such file", exit_code=2)
    elif os.path.isfile(program.target):
        _check_encoding(program.target)


def _decodes(data: bytes, encoding: str) -> bool:
    try:
        data.decode(encoding)
    except UnicodeDecodeError:
        return False
    return True


def _check_encoding(path: str) -> None:
    """Refuse, as python does (exit 1), a script whose bytes are not in its declared encoding (UTF-8 unless a
    coding line says otherwise): compile() of the bytes takes a comment python refuses, and every line's code
    would then be unreadable in the report."""
    try:
        with io.open_code(os.path.abspath(path)) as f:
            data = f.read()
    except OSError:
        return  # the run itself says why it cannot be read
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # a coding line naming no codec, or the first two lines not UTF-8 (said below)
        first_two = b"".join(data.splitlines(keepends=True)[:2])
        if _decodes(first_two, "utf-8"):
            raise StepscopeError(f"{path}: {exc.msg} (python refuses to run it)", exit_code=1) from None
        encoding = "utf-8"
    try:
        data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        if encoding == "utf-8":  # python's own words
            what = f"Non-UTF-8 code starting with '\\x{data[exc.start]:02x}' on line {line}, but no encoding declared"
        else:
            what = f"line {line} is not {encoding}, the encoding it declares"
        raise StepscopeError(f"{path}: {what} (python refuses to run it)",
                             hint="save the file as UTF-8, or declare its encoding (# -*- coding: latin-1 -*-, "
                                  "PEP 263)", exit_code=1) from None


def run_program(program: Program, stopping: Callable[[], bool] = lambda: False,
                sigterm: SigtermHandler | None = None) -> Outcome:
    """Run to the end, a stop (StopProgram, or Ctrl-C while `stopping()`), a SIGTERM (raised in the program
    by `sigterm` while it runs) or a failure; never raises."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [program.target, *program.args]
    _set_path0(program)
    if sigterm is not None:
        sigterm.raising = True
    try:
        if program.module:
            runpy.run_module(program.target, run_name="__main__", alter_sys=True)
        else:
            _run_script(program.target)
    except StopProgram:
        return Outcome(0, "stopped")
    except Terminated as exc:
        return Outcome(exc.exit_code, "terminated", f"was terminated ({exc.name})")
    except SystemExit as exc:
        if stopping():
            return Outcome(0, "stopped")
        return _exit_outcome(exc.code)
    except KeyboardInterrupt as exc:
        if stopping():
            return Outcome(0, "stopped")
        _print_user_traceback(exc)
        return Outcome(130, "interrupted", "was interrupted (KeyboardInterrupt)")
    except BaseException as exc:  # the program's own failure: reported, then its exit code
        if stopping():
            return Outcome(0, "stopped", f"the program raised {type(exc).__name__} while stopping")
        _print_user_traceback(exc)
        return Outcome(1, "exception", f"raised {type(exc).__name__}: {_first_line(exc)}")
    finally:
        if sigterm is not None:
            sigterm.raising = False  # from here on stepscope exports and writes: a SIGTERM is only remembered
        sys.argv = saved_argv
        sys.path[:] = saved_path  # the same list object: importers may hold it
    return Outcome(0, "finished")


def _set_path0(program: Program) -> None:
    """python puts the script's folder (symlinks resolved) or, for -m, the working folder first."""
    first = os.getcwd() if program.module else os.path.dirname(os.path.realpath(program.target))
    if sys.path:
        sys.path[0] = first
    else:
        sys.path.append(first)


def _run_script(path: str) -> None:
    """Execute a file as `__main__` (`__file__` absolute, `sys.argv[0]` as given, like python 3.9+)."""
    abs_path = os.path.abspath(path)
    if os.path.isdir(abs_path) or zipfile.is_zipfile(abs_path):
        runpy.run_path(abs_path, run_name="__main__")  # a folder or zip with __main__.py
        return
    with io.open_code(abs_path) as f:
        code = compile(f.read(), abs_path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=abs_path, __cached__=None, __package__=None, __spec__=None, __builtins__=builtins,
        __loader__=importlib.machinery.SourceFileLoader("__main__", abs_path),
    )
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _exit_outcome(code: object) -> Outcome:
    """SystemExit as python treats it: None is 0, an int is itself, anything else is printed and 1."""
    if code is None:
        return Outcome(0, "finished")
    if isinstance(code, int):
        return Outcome(code, "exit" if code else "finished", f"exited with code {code}" if code else "")
    print(code, file=sys.stderr)
    return Outcome(1, "exit", f"exited with message {str(code)!r}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the stepscope package's folder
_RUNPY = {os.path.abspath(runpy.__file__), "<frozen runpy>"}


def _ours(filename: str) -> bool:
    """A frame of stepscope (this runner, and the wrappers attribution puts between a user's line and torch:
    the DataLoader's __next__, the line-range mode) or of runpy."""
    return filename in _RUNPY or os.path.abspath(filename).startswith(_PACKAGE + os.sep)


def _print_user_traceback(exc: BaseException) -> None:
    """The traceback python would print for the program alone: every frame of stepscope's and runpy's left
    out, wherever it sits in the stack and in every chained exception."""
    report = traceback.TracebackException.from_exception(exc)
    todo, seen = [report], set()
    while todo:
        part = todo.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        part.stack = traceback.StackSummary.from_list([f for f in part.stack if not _ours(f.filename)])
        todo += [p for p in (part.__cause__, part.__context__, *(getattr(part, "exceptions", None) or ())) if p]
    sys.stdout.flush()
    print("".join(report.format()), end="", file=sys.stderr)
    sys.stderr.flush()
