"""The run folder: `stepscope-runs/<name>-<YYYYmmdd-HHMMSS>/`, created before the program starts; under a launcher,
each rank's `rank<N>/` inside one job folder, `stepscope-runs/<name>-<job>/`."""

from __future__ import annotations

import errno
import re
import time
from pathlib import Path

from stepscope.errors import StepscopeError

DEFAULT_BASE = Path("stepscope-runs")  # the files a run writes into it: model/runfolder.py


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "run"


def new_run_folder(name: str, out: str | Path | None = None, *, base: Path = DEFAULT_BASE,
                   now: float | None = None) -> Path:
    """Create and return the folder; an existing `out` must be empty, a derived name gets a suffix."""
    if out is not None:
        path = Path(out)
        if path.exists() and not path.is_dir():
            raise StepscopeError(f"{path}: is a file; --out names the folder to write the run into",
                                 hint="give a new or empty folder, or leave --out out for one under stepscope-runs/")
        if path.exists() and any(path.iterdir()):
            raise StepscopeError(f"{path}: already exists and is not an empty folder",
                                 hint="choose another --out, or leave it out for a new folder under stepscope-runs/")
        return _mkdir(path, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    stem = f"{_slug(name)}-{stamp}"
    for i in range(1, 1000):
        path = base / (stem if i == 1 else f"{stem}-{i}")
        if not path.exists():
            try:
                return _mkdir(path, exist_ok=False)
            except FileExistsError:
                continue  # another run took it this very second
    raise StepscopeError(f"{base}: cannot find a free folder name for {stem}")


def rank_folder(name: str, job: str, rank: int, out: str | Path | None = None, *,
                base: Path = DEFAULT_BASE) -> Path:
    """A rank's folder inside its job's folder: `out` (the job folder, when given) or `base/<name>-<job>`, which
    every rank of the job names alike (capture/launcher.py), so the first to get here creates it."""
    job_folder = Path(out) if out is not None else base / f"{_slug(name)}-{_slug(job)}"
    if job_folder.exists() and not job_folder.is_dir():
        raise StepscopeError(f"{job_folder}: is a file; --out names the job's folder, which holds a folder per rank")
    return job_folder / f"rank{rank}"


def _mkdir(path: Path, exist_ok: bool) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=exist_ok)
    except FileExistsError:
        raise
    except OSError as exc:
        hint = ("give --out a folder you can write to (e.g. --out /tmp/run)"
                if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else None)
        raise StepscopeError(f"{path}: cannot create the run folder ({exc.strerror or exc})", hint=hint) from None
    return path
