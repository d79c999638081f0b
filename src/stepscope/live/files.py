"""Which files a watched program is made of, and a watcher that says when one of them is saved: `watchfiles`
(the optional extra `stepscope[watch]`: the OS's file events) when it is installed, else polling their stat."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from stepscope.model.report import Report

try:  # optional: events from the OS instead of polling
    import watchfiles
except ImportError:  # pragma: no cover - depends on the installation
    watchfiles = None

POLL_S = 0.25
MAX_FILES = 2000  # a script's folder is a project, not a home directory: stop listing beyond this
SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "dist-packages", "build", "dist", "stepscope-runs"}


def local_modules(folder: Path) -> set[Path]:
    """The .py files under `folder`, leaving out hidden folders, virtual environments and build output."""
    found: set[Path] = set()
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS
                   and not (Path(root, d) / "pyvenv.cfg").exists()]
        found.update(Path(root, f).resolve() for f in files if f.endswith(".py"))
        if len(found) >= MAX_FILES:
            break
    return found


def reported_files(report: Report | None, roots: Iterable[Path]) -> set[Path]:
    """The user's files the report names (its lines, syncs and recommendations), resolved against `roots`."""
    if report is None:
        return set()
    names = {r.file for r in (report.lines.rows if report.lines else []) if r.file}
    names |= {s.file for s in (report.lines.syncs if report.lines else []) if s.file}
    names |= {r.location.file for r in report.recommendations if r.location and r.location.file}
    found = set()
    for name in names:
        for root in roots:
            path = (Path(root) / name).resolve()
            if path.is_file():
                found.add(path)
                break
    return found


def watched_files(script: Path | None, cwd: Path, report: Report | None) -> set[Path]:
    """The script, the local modules beside it, and the user files the last report names (its imports from
    elsewhere, e.g. a package installed in editable mode)."""
    folder = script.parent if script is not None else cwd
    files = local_modules(folder) | reported_files(report, (cwd, folder))
    if script is not None:
        files.add(script.resolve())
    return files


class FileWatcher:
    """Calls `on_change(path)` (on its own thread) when one of the files `files()` returns is written."""

    def __init__(self, files: Callable[[], set[Path]], on_change: Callable[[Path], None], *,
                 polling: bool | None = None) -> None:
        self._files, self._on_change = files, on_change
        self.backend = "polling" if polling or watchfiles is None else "watchfiles"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="stepscope-watch-files")

    def start(self) -> FileWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)

    def _run(self) -> None:
        if self.backend == "watchfiles":
            self._run_events()
        else:
            self._run_polling()

    def _run_events(self) -> None:
        """The OS's events for the folders of the watched files; watched again when that set of folders changes
        (a report naming a module elsewhere)."""
        while not self._stop.is_set():
            folders = _folders(self._files())
            if not folders:  # nothing to watch yet
                self._stop.wait(POLL_S)
                continue
            for changes in watchfiles.watch(*folders, stop_event=self._stop, debounce=50, step=25,
                                            rust_timeout=1000, yield_on_timeout=True, raise_interrupt=False):
                wanted = self._files()
                hit = next((Path(name) for _, name in changes if Path(name).resolve() in wanted), None)
                if hit is not None:
                    self._on_change(hit)
                if _folders(wanted) != folders:
                    break

    def _run_polling(self) -> None:
        seen = _stats(self._files())
        while not self._stop.wait(POLL_S):
            now = _stats(self._files())
            changed = [p for p, st in now.items() if p in seen and seen[p] != st]
            seen = now
            if changed:
                self._on_change(changed[0])


def _folders(files: set[Path]) -> list[Path]:
    """The fewest folders that hold every file (a folder inside another is watched through it)."""
    ordered = sorted({p.parent for p in files}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for folder in ordered:
        if not any(folder.is_relative_to(k) for k in kept):
            kept.append(folder)
    return kept


def _stats(files: set[Path]) -> dict[Path, tuple[int, int]]:
    out = {}
    for path in files:
        try:
            st = path.stat()
        except OSError:
            continue
        out[path] = (st.st_mtime_ns, st.st_size)
    return out
