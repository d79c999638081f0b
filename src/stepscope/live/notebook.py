"""`%%stepscope`: profile a notebook cell's training loop inside the kernel and show the report under the cell; the
cell run again shows what changed since its last run.

    %load_ext stepscope
    %%stepscope --skip 2 --steps 3
    for x, y in loader: ...        # no p.step(): the steps are found as `stepscope run` finds them

The capture is `stepscope.profile(hooks=True)` around the cell's code, run in the notebook's namespace; the cell runs
to its end (nothing stops it after the window). Every hook, mode and patch comes out when the capture ends, so the
kernel runs as it did before (tests/test_notebook_leaks.py runs ten captures in one process and checks).
"""

from __future__ import annotations

import atexit
import linecache
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display
from rich.console import RenderableType
from rich.text import Text

from stepscope.api import prepare_folder, profile
from stepscope.compare import compare
from stepscope.errors import StepscopeError
from stepscope.live.inline import bundle
from stepscope.model.report import Report
from stepscope.report.diff import DiffTerminalRenderer
from stepscope.report.terminal import TerminalRenderer

CELL_FILE = "<cell>"  # the profiled code's file name: the same on every run, so the diff matches its lines


@dataclass
class LastRun:
    report: Report
    folder: Path
    number: int  # this cell's runs so far
    own_folder: bool


class CellRuns:
    """The kernel's captures: where their files go and the last report of each cell."""

    def __init__(self) -> None:
        self.last: dict[str, LastRun] = {}
        self._temp: tempfile.TemporaryDirectory[str] | None = None
        self._count = 0

    def folder(self, out: str | None) -> tuple[Path, bool]:
        """A run folder: `out` (new or empty), else a new one in the kernel's temporary folder."""
        if out is not None:
            return prepare_folder(out, False, "notebook"), False
        if self._temp is None:
            self._temp = tempfile.TemporaryDirectory(prefix="stepscope-notebook-", ignore_cleanup_errors=True)
            atexit.register(self._temp.cleanup)
        self._count += 1
        folder = Path(self._temp.name) / f"run-{self._count}"
        folder.mkdir()
        return folder, True

    @staticmethod
    def discard(folder: Path, own: bool) -> None:
        """A run with no report: its files go, unless the user named the folder."""
        if own:
            shutil.rmtree(folder, ignore_errors=True)

    def keep(self, key: str, report: Report, folder: Path, own_folder: bool) -> LastRun | None:
        """Remember `report` as the cell's last run; returns the run it replaces."""
        previous = self.last.get(key)
        self.last[key] = LastRun(report, folder, (previous.number if previous else 0) + 1, own_folder)
        if previous is not None and previous.own_folder:
            shutil.rmtree(previous.folder, ignore_errors=True)  # its Report is all a diff needs
        return previous


@magics_class
class StepscopeMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.runs = CellRuns()
        self.cell_id: str | None = None  # the running cell's id, when the front end sends one (JupyterLab does)

    def pre_run_cell(self, info: Any) -> None:
        self.cell_id = getattr(info, "cell_id", None)

    @magic_arguments()
    @argument("--skip", type=int, help="steps run unprofiled first (default: stepscope run's)")
    @argument("--warmup", type=int, help="profiled steps thrown away (default: stepscope run's)")
    @argument("--steps", type=int, help="steps recorded (default: stepscope run's)")
    @argument("--batch-size", type=int, default=None, help="samples per step (default: from the data)")
    @argument("--name", default=None, help="what this cell's runs are compared under (default: the cell's id, "
              "else the last %%%%stepscope run in this kernel)")
    @argument("-o", "--out", default=None, help="a new or empty folder for the run's files (default: a temporary "
              "folder, removed when the kernel ends)")
    @argument("--full", action="store_true", help="every section's detail lines too")
    @cell_magic
    def stepscope(self, line: str, cell: str) -> None:
        """Profile the cell's loop and show the report (and, from its second run on, the diff against the last)."""
        args = parse_argstring(self.stepscope, line)
        key = args.name or self.cell_id or ""
        given = {k: v for k in ("skip", "warmup", "steps", "batch_size") if (v := getattr(args, k)) is not None}
        try:
            profile(**given)  # the options are checked before anything is made
            folder, own = self.runs.folder(args.out)
        except (StepscopeError, ValueError) as exc:
            _say(f"stepscope: {exc}")
            return
        capture = profile(out=folder, force=True, hooks=True, **given)  # force: the folder is new or empty
        capture.start()
        try:
            self._run(cell)
        except BaseException:
            capture.stop()
            self.runs.discard(folder, own)
            _say("stepscope: the cell raised, so there is no report (the capture is stopped and removed)")
            raise
        capture.stop()
        try:
            report = capture.report
        except StepscopeError as exc:
            self.runs.discard(folder, own)
            _say(f"stepscope: {exc}", "the loop may have ended before the window: lower --skip, --warmup or --steps")
            return
        previous = self.runs.keep(key, report, folder, own)
        display(bundle(self._parts(report, previous, key, folder, args.full)), raw=True)

    def _run(self, cell: str) -> None:
        """The cell's code in the notebook's namespace, under one file name so its lines compare across runs."""
        code = self.shell.transform_cell(cell)
        linecache.cache[CELL_FILE] = (len(code), None, code.splitlines(keepends=True), CELL_FILE)
        exec(compile(code, CELL_FILE, "exec"), self.shell.user_ns)

    def _parts(self, report: Report, previous: LastRun | None, key: str, folder: Path,
               full: bool) -> list[RenderableType]:
        number = self.runs.last[key].number
        parts: list[RenderableType] = []
        if previous is not None:
            against = "this cell's" if key else "the last %%stepscope"
            parts += [Text(f"stepscope: run {number}, compared with {against} run {previous.number}",
                           style="bold"),
                      DiffTerminalRenderer().render(compare(previous.report, report)), Text()]
        parts += [Text(f"stepscope: run {number}{' of this cell' if key else ''}; files in {folder}", style="dim"),
                  TerminalRenderer(full=full).render(report)]
        return parts


def _say(message: str, hint: str | None = None) -> None:
    display({"text/plain": message + (f"\n  hint: {hint}" if hint else "")}, raw=True)


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext stepscope`: registers `%%stepscope` (loading it twice keeps one)."""
    if id(ipython) in _loaded:
        return
    magics = StepscopeMagics(ipython)
    ipython.register_magics(magics)
    ipython.events.register("pre_run_cell", magics.pre_run_cell)
    _loaded[id(ipython)] = magics


def unload_ipython_extension(ipython: Any) -> None:
    magics = _loaded.pop(id(ipython), None)
    if magics is not None:
        ipython.events.unregister("pre_run_cell", magics.pre_run_cell)


_loaded: dict[int, StepscopeMagics] = {}
