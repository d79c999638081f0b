"""One open Nsight Systems export: its tables, typed fetches, and its string table mapped into ours."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from itertools import chain
from pathlib import Path

import numpy as np

from stepscope.errors import StepscopeError
from stepscope.trace.model import NONE
from stepscope.trace.names import MAX_NAME_CHARS, bounded_name

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
OSRT = "OSRT_API"
OVERHEAD = "PROFILER_OVERHEAD"
EVENT_TABLES = (KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER, SYNC, NVTX, OSRT, OVERHEAD)
# Tables every nsys export has, events or not: they tell an empty export from some other database.
NSYS_MARKER_TABLES = ("StringIds", "ThreadNames", "TARGET_INFO_GPU", "EXPORT_META_DATA", "META_DATA_EXPORT")
INVALID_ID = 0xFFFFFFFF  # CUPTI's "no stream" / "no event"

Block = dict[str, np.ndarray]  # one table's rows as event columns, plus "process" for correlation scoping
_ID_CHUNK = 500  # ids per `IN (...)` lookup, under SQLite's oldest bound-parameter limit


class NsysDatabase:
    """The export's schema, its fetches as numpy, our string table, and the notes the readers leave."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db = db
        self.path = path
        self.tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        self._columns: dict[str, set[str]] = {}
        self.strings: dict[str, int] = {}  # our string table, in first-seen order
        self.notes: list[str] = []
        self.shortened_names = 0
        self.unknown_names = 0  # rows whose name id is not in StringIds (or has no text there)
        self._long: dict[str, str] = {}  # long names already shortened

    def execute(self, sql: str, parameters: Iterable = ()) -> sqlite3.Cursor:
        return self.db.execute(sql, tuple(parameters))

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            rows = self.db.execute(f'PRAGMA table_info("{table}")') if table in self.tables else []
            self._columns[table] = {row[1] for row in rows}
        return self._columns[table]

    def column(self, table: str, *names: str, default: str = "-1") -> str:
        """SQL for the first of `names` the table has, NULLs as `default`; `default` when it has none."""
        present = [n for n in names if n in self.columns(table)]
        return f"coalesce({', '.join([*present, default])})" if present else default

    def ints(self, sql: str, width: int, table: str) -> np.ndarray:
        """Rows of integers as an (n, width) int64 array, without building a list of rows."""
        try:
            flat = np.fromiter(chain.from_iterable(self.db.execute(sql)), dtype=np.int64)
        except sqlite3.OperationalError as exc:  # a table of that name, but not nsys's columns
            raise StepscopeError(f"{self.path}: {table} is not as Nsight Systems writes it ({exc})") from None
        except (TypeError, ValueError, OverflowError):
            raise StepscopeError(f"{self.path}: {table} holds values that are not integers") from None
        return flat.reshape(-1, width)

    def intern(self, text: str) -> int:
        if len(text) > MAX_NAME_CHARS:
            self.shortened_names += text not in self._long
            text = self._long.setdefault(text, bounded_name(text))
        return self.strings.setdefault(text, len(self.strings))

    def lookup(self, ids: Iterable[int]) -> dict[int, str]:
        """StringIds values for the given ids, fetched in chunks."""
        ids = list(ids)
        found: dict[int, str] = {}
        if "StringIds" not in self.tables:
            return found
        for i in range(0, len(ids), _ID_CHUNK):
            chunk = ids[i:i + _ID_CHUNK]
            marks = ", ".join("?" * len(chunk))
            rows = self.db.execute(f"SELECT id, value FROM StringIds WHERE id IN ({marks})", chunk)
            found.update((i, v) for i, v in rows if isinstance(v, str))
        return found

    def names(self, ids: np.ndarray, clean: Callable[[str], str] = str) -> np.ndarray:
        """Map nsys string ids to our string table, looking each distinct id up once."""
        lut, inverse = self.name_lut(ids, clean)
        return lut[inverse]

    def name_lut(self, ids: np.ndarray, clean: Callable[[str], str] = str) -> tuple[np.ndarray, np.ndarray]:
        """Our string index per distinct id, and each row's position among the distinct ids."""
        unique, inverse = np.unique(ids, return_inverse=True)
        found = self.lookup(unique.tolist())
        if missing := [i for i in unique.tolist() if i not in found]:
            self.unknown_names += int(np.isin(inverse.reshape(-1), np.flatnonzero(np.isin(unique, missing))).sum())
        lut = np.array([self.intern(clean(found.get(i, f"<unknown name {i}>"))) for i in unique.tolist()],
                       dtype=np.int32)
        return lut, inverse.reshape(-1)

    def enum(self, table: str, prefix: str) -> dict[int, str]:
        """An ENUM_* table as id -> symbol without its prefix; empty when the export has none."""
        if table not in self.tables or not {"id", "name"} <= self.columns(table):
            return {}
        return {i: str(name).removeprefix(prefix) for i, name in self.db.execute(
            f"SELECT id, name FROM {table} WHERE name IS NOT NULL") if isinstance(i, int)}


def absent_if(values: np.ndarray, sentinel: int) -> np.ndarray:
    """The column with `sentinel` (how a packed NULL or CUPTI's invalid id reads) as NONE."""
    return np.where(values == sentinel, NONE, values)


def pid_of(global_id: int) -> int:
    return (global_id >> 24) & 0xFFFFFF if global_id >= 0 else NONE
