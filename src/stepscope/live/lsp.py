"""`stepscope lsp`: a language server over stdio that re-profiles the training script on save (the live engine's
Reprofiler, debounced; a new save cancels the run in flight) and shows each line's cost as an inlay hint, the sync
lines and a failed run as diagnostics, and the verdict as a code lens on the training loop, with $/progress while it
profiles.

The script: the saved file when it is a training script (it imports torch and runs a backward pass or an optimizer
step), else the last one; or the program in initializationOptions, {"program": ["train.py", "--lr", "0.1"]}, run in
the workspace's root (or "cwd"), re-profiled on the save of any Python file. "runOptions" replaces `stepscope run`'s
window options, "debounce" the seconds to wait for another save (0.5).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsprotocol import types as t
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path

from stepscope.live import editor
from stepscope.live.compare import History
from stepscope.live.engine import (
    LOG,
    Debouncer,
    Event,
    Finished,
    FirstFigures,
    Progress,
    Reprofiler,
    Result,
    Started,
    Target,
)
from stepscope.live.lsp_frames import serve_io
from stepscope.live.progress import ProgressReporter
from stepscope.model.report import Report
from stepscope.version import __version__

DEBOUNCE_S = 0.5
MAX_DEBOUNCE_S = 60
OPTIONS = ("program", "cwd", "runOptions", "debounce")  # the initializationOptions taken
LOG_WAIT_S, LOG_WAITS = 0.25, 20  # how long the traceback of a program that raised after its report is awaited
REPROFILE = "stepscope.reprofile"  # the code lens's command
SEVERITY = {"error": t.DiagnosticSeverity.Error, "warning": t.DiagnosticSeverity.Warning}


class StepscopeServer(LanguageServer):
    def __init__(self, debounce_s: float = DEBOUNCE_S) -> None:
        super().__init__("stepscope", __version__, text_document_sync_kind=t.TextDocumentSyncKind.Full)
        self.debounce_s = debounce_s
        self.loop: asyncio.AbstractEventLoop | None = None
        self.program: tuple[str, ...] | None = None  # from initializationOptions
        self.cwd: Path | None = None
        self.run_options: tuple[str, ...] | None = None
        self.script: Path | None = None  # the training script last saved (or the configured program's)
        self.target: Target | None = None
        self.profiler: Reprofiler | None = None
        self.generation = 0  # which Reprofiler: events of one replaced are stale
        self.last_run = 0  # the run id last submitted
        self.workdir = Path(tempfile.mkdtemp(prefix="stepscope-lsp-"))
        self.debouncer = Debouncer(debounce_s, lambda: self.on_loop(self.submit))
        self.progress = ProgressReporter(self)
        # The previous report and the target's first (the baseline): hints say the change since the previous.
        self.history: History[Report] = History(lambda report: report)
        self.hints: list[editor.Hint] = []
        self.marks: dict[Path, list[editor.Mark]] = {}
        self.lens: editor.Lens | None = None

    # -- configuration ---------------------------------------------------------------------------------

    def configure(self, params: t.InitializeParams) -> None:
        """The initializationOptions, each checked for its type: a wrong one is one warning, its default used."""
        self.loop = asyncio.get_running_loop()
        raw = params.initialization_options
        if raw is not None and not isinstance(raw, dict):
            self._warn("initializationOptions must be an object: " + ", ".join(OPTIONS))
        options = raw if isinstance(raw, dict) else {}
        for key in options:
            if key not in OPTIONS:
                self._warn(f"initializationOptions.{str(key)[:40]}: not an option (" + ", ".join(OPTIONS) + ")")
        root = to_fs_path(params.root_uri) if params.root_uri else params.root_path
        cwd = options.get("cwd")
        if cwd is not None and _folder(cwd) is None:
            self._warn("initializationOptions.cwd must be a folder's path (a string)")
            cwd = None
        self.cwd = _folder(cwd) or _folder(root) or Path.cwd()
        program, run_options, debounce = (options.get(k) for k in ("program", "runOptions", "debounce"))
        if program is not None:
            if _strings(program) and program:
                self.program = tuple(program)
                if program[0] != "-m":
                    self.script = (self.cwd / program[0]).resolve()
                    if not self.script.is_file():
                        self._warn(f"initializationOptions.program: {self.script}: no such file")
            else:
                self._warn("initializationOptions.program must be a list of strings: the script and its arguments")
        if run_options is not None:
            if _strings(run_options):
                self.run_options = tuple(run_options)
            else:
                self._warn("initializationOptions.runOptions must be a list of strings (stepscope run's options)")
        if debounce is not None:
            if (isinstance(debounce, (int, float)) and not isinstance(debounce, bool)
                    and 0 <= debounce <= MAX_DEBOUNCE_S):  # NaN and Infinity (JSON takes both) fail here
                self.debounce_s = float(debounce)
                self.debouncer = Debouncer(self.debounce_s, lambda: self.on_loop(self.submit))
            else:
                self._warn(f"initializationOptions.debounce must be a number of seconds from 0 to {MAX_DEBOUNCE_S}")

    def _warn(self, text: str) -> None:
        """One line the editor shows to the user (bad configuration: the server goes on with its defaults)."""
        self.window_show_message(t.ShowMessageParams(t.MessageType.Warning, f"stepscope: {text}"))

    def on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn` on the server's event loop (the engine and the debouncer call from their own threads)."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._guarded, fn, *args)

    def _guarded(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # the server outlives anything one capture does
            self.window_log_message(t.LogMessageParams(t.MessageType.Error, f"stepscope: {type(exc).__name__}: {exc}"))

    # -- saves and captures ----------------------------------------------------------------------------

    def saved(self, path: Path) -> None:
        """A save: a training script becomes the target (or, with a module as the program, where the lens goes);
        any Python file re-profiles the current target."""
        if path.suffix != ".py":
            return
        if self.program is None or self.program[0] == "-m":
            with contextlib.suppress(OSError, UnicodeDecodeError):
                if editor.is_training_script(path.read_text()):
                    self.script = path
        if self.program is None and self.script is None:
            return
        if self.profiler is not None:
            self.profiler.cancel()  # a new save makes the run in flight stale
        self.progress.cancel_all("cancelled: the file was saved again", self.last_run)
        self.debouncer()

    def submit(self) -> None:
        assert self.cwd is not None
        if self.program is not None:
            argv, cwd = self.program, self.cwd
        else:
            assert self.script is not None
            argv, cwd = (str(self.script),), self.script.parent
        target = Target(argv, cwd) if self.run_options is None else Target(argv, cwd, self.run_options)
        if target != self.target:
            if self.profiler is not None:
                self.profiler.close()
            self.progress.reset("cancelled: another script is profiled")
            self.generation += 1
            self.target, self.history, self.last_run = target, History(lambda report: report), 0
            self.profiler = Reprofiler(target, on_event=lambda e, g=self.generation: self.on_loop(self.on_event, g, e),
                                       workdir=self.workdir / f"engine-{self.generation}")
        assert self.profiler is not None
        self.last_run = self.profiler.submit()

    def on_event(self, generation: int, event: Event) -> None:
        if generation != self.generation:
            return
        if isinstance(event, Started):
            assert self.target is not None
            self.progress.begin(event.run_id, "stepscope: profiling", " ".join(self.target.argv))
        elif isinstance(event, Progress):
            self.progress.report(event.run_id, event.text)
        elif isinstance(event, FirstFigures):
            self.progress.report(event.run_id, f"step {editor.ms(event.step_ms * 1e3)}")
        elif isinstance(event, Finished):
            self.finished(event.result)

    def finished(self, result: Result, generation: int | None = None, waited: int = 0) -> None:
        assert self.target is not None
        if generation is not None and (generation != self.generation or result.run_id != self.last_run):
            return  # a newer save came while the output was awaited
        script = self.script
        bases = (self.target.cwd, *((script.parent,) if script else ()))
        old = set(self.marks)
        log_path = result.folder.parent / f"{result.folder.name}.{LOG}"  # where the engine keeps the output
        log = log_path.read_text(errors="replace") if log_path.is_file() else ""
        error = editor.failure(result.error, result.report, log)
        if error and result.report is not None and editor.exception_line(log) is None and waited < LOG_WAITS:
            # The program raised after the window began: the result comes with report.json, while the engine's
            # copy of its output (the traceback, for the line that raised) may not have reached the file yet.
            assert self.loop is not None
            self.loop.call_later(LOG_WAIT_S, self._guarded, self.finished, result, self.generation, waited + 1)
            return
        if result.report is None or error is not None:
            self.progress.end(result.run_id, f"failed: {error}")
            mark = editor.failure_mark(error or "no report", log, script, bases)
            self.hints, self.marks = [], {mark.path: [mark]} if mark else {}
            self.lens = editor.Lens(script, editor.training_loop_line(self._source(script)),
                                    f"stepscope: the last run failed: {error}") if script else None
        else:
            report = result.report
            changes = self.history.add(report)
            self.hints = editor.line_hints(changes, bases)
            self.marks = {}
            for mark in editor.sync_marks(report, bases):
                self.marks.setdefault(mark.path, []).append(mark)
            self.lens = editor.verdict_lens(report, changes, script, self._source(script)) if script else None
            self.progress.end(result.run_id, f"step {editor.ms(report.summary.step_time_us or 0)}")
        for path in old | set(self.marks):
            self.text_document_publish_diagnostics(t.PublishDiagnosticsParams(
                from_fs_path(str(path)) or "", [_diagnostic(m, self._source(path)) for m in self.marks.get(path, [])]))
        workspace = self.client_capabilities.workspace
        if workspace and workspace.inlay_hint and workspace.inlay_hint.refresh_support:
            self.workspace_inlay_hint_refresh(None)
        if workspace and workspace.code_lens and workspace.code_lens.refresh_support:
            self.workspace_code_lens_refresh(None)

    def _source(self, path: Path) -> str:
        uri = from_fs_path(str(path))
        with contextlib.suppress(Exception):
            return self.workspace.get_text_document(uri or "").source
        return ""

    def close(self) -> None:
        self.debouncer.cancel()
        if self.profiler is not None:
            self.profiler.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(_path_text(x) for x in value)


def _path_text(value: Any) -> bool:
    """A string a path or an argument can be made of (a NUL byte ends both at the OS)."""
    return isinstance(value, str) and "\0" not in value


def _folder(text: str | None) -> Path | None:
    """`text` as a folder's resolved path; None when it is not one."""
    if not text or not _path_text(text):
        return None
    try:
        path = Path(text).resolve()
        return path if path.is_dir() else None
    except (OSError, ValueError):
        return None


def _line_range(line: int, source: str) -> t.Range:
    """The whole of 1-based `line`, its indentation left out."""
    lines = source.splitlines()
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    start = len(text) - len(text.lstrip())
    return t.Range(t.Position(max(line - 1, 0), start), t.Position(max(line - 1, 0), max(len(text), start)))


def _diagnostic(mark: editor.Mark, source: str) -> t.Diagnostic:
    return t.Diagnostic(_line_range(mark.line, source), mark.message, severity=SEVERITY[mark.severity],
                        source="stepscope")


def make_server(debounce_s: float = DEBOUNCE_S) -> StepscopeServer:
    server = StepscopeServer(debounce_s)

    @server.feature(t.INITIALIZE)
    async def initialize(ls: StepscopeServer, params: t.InitializeParams) -> None:
        ls.configure(params)

    @server.feature(t.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: StepscopeServer, params: t.DidSaveTextDocumentParams) -> None:
        ls._guarded(ls.saved, Path(to_fs_path(params.text_document.uri) or "").resolve())

    @server.feature(t.TEXT_DOCUMENT_INLAY_HINT)
    def inlay_hints(ls: StepscopeServer, params: t.InlayHintParams) -> list[t.InlayHint]:
        path = Path(to_fs_path(params.text_document.uri) or "").resolve()
        lines = ls._source(path).splitlines()
        first, last = params.range.start.line + 1, params.range.end.line + 1
        return [t.InlayHint(t.Position(h.line - 1, len(lines[h.line - 1]) if h.line <= len(lines) else 0), h.label,
                            tooltip=h.tooltip, padding_left=True)
                for h in ls.hints if h.path == path and first <= h.line <= last]

    @server.feature(t.TEXT_DOCUMENT_CODE_LENS)
    def code_lens(ls: StepscopeServer, params: t.CodeLensParams) -> list[t.CodeLens]:
        path = Path(to_fs_path(params.text_document.uri) or "").resolve()
        lens = ls.lens
        if lens is None or lens.path != path:
            return []
        return [t.CodeLens(_line_range(lens.line, ls._source(path)),
                           t.Command(title=lens.title, command=REPROFILE, arguments=[params.text_document.uri]))]

    @server.command(REPROFILE)
    def reprofile(ls: StepscopeServer, *args: Any) -> None:
        if ls.script is not None:
            ls._guarded(ls.saved, ls.script)

    @server.feature(t.SHUTDOWN)
    def shutdown(ls: StepscopeServer, *args: Any) -> None:
        ls.close()

    return server


def serve(debounce_s: float = DEBOUNCE_S) -> None:
    """Serve over stdin and stdout until the client says exit (or goes away). SIGTERM and SIGHUP stop the capture in
    flight, remove the temporary folder and end the process at once: pygls's own ending waits for its stdin reader,
    which the client may hold open for ever."""
    server = make_server(debounce_s)

    def end(signum: int, frame: object) -> None:
        server.close()
        os._exit(0)

    previous = {sig: signal.signal(sig, end) for sig in ENDING if signal.getsignal(sig) == signal.SIG_DFL}
    try:
        serve_io(server, sys.stdin.buffer, sys.stdout.buffer)  # pygls's start_io, with its framing made safe
    finally:
        server.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


ENDING = tuple(s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)
