"""Open what the user points at: a Kineto trace, a folder of per-rank traces, or an Nsight Systems export."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from stepscope.errors import StepscopeError
from stepscope.model.runfolder import TRACE, is_run_folder
from stepscope.trace.kineto import read_kineto
from stepscope.trace.model import Trace

SQLITE_MAGIC = b"SQLite format 3\x00"
TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def expand(paths: Iterable[str | Path]) -> list[Path]:
    """Files to read: folders become the trace files inside them, sorted by name."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise StepscopeError(f"{path}: no such file or folder")
        if is_run_folder(path):
            if not (path / TRACE).is_file():  # a FIFO waits for a writer, /dev/zero never ends
                raise StepscopeError(f"{path / TRACE}: not a regular file (a FIFO, a device or a link to one): "
                                     "the run folder's trace is not read")
            files.append(path / TRACE)  # a `stepscope run` folder: its trace, not its report or telemetry
        elif path.is_dir():
            inside = sorted(
                p for p in path.iterdir()
                if p.is_file() and (p.name.endswith(TRACE_SUFFIXES) or p.suffix in (".sqlite", ".nsys-rep"))
            )
            # A job's folder (`stepscope run` under torchrun: rank0/, rank1/, ...): the traces of the run folders in it.
            inside = inside or sorted(p / TRACE for p in path.iterdir() if (p / TRACE).is_file())
            if not inside:
                raise StepscopeError(
                    f"{path}: folder holds no traces (expected *.json, *.json.gz, *.sqlite or *.nsys-rep files, or "
                    "stepscope run folders)"
                )
            files.extend(inside)
        else:
            files.append(path)
    if not files:
        raise StepscopeError("no trace given")
    return files


def read_trace(path: str | Path, progress: Callable[[int, int], None] | None = None) -> Trace:
    """Read one file, choosing the reader by content, not by name alone; `progress` is called with (bytes read,
    file size) as a Kineto trace streams in."""
    path = Path(path)
    if path.suffix == ".nsys-rep" or (path.is_file() and _is_sqlite(path)):
        from stepscope.trace.nsys import export_and_read, read_nsys  # its reader and sqlite3 only for Nsight files

        return export_and_read(path) if path.suffix == ".nsys-rep" else read_nsys(path)
    if path.suffix == ".sqlite" and path.is_file():
        raise StepscopeError(f"{path}: not an SQLite database (it does not start with {SQLITE_MAGIC[:15].decode()!r})",
                             hint="export a Nsight Systems report with: nsys export --type sqlite report.nsys-rep")
    return read_kineto(path, progress)


def load_traces(paths: Iterable[str | Path]) -> list[Trace]:
    return [read_trace(p) for p in expand(paths)]
