"""Reader for Nsight Systems SQLite exports (`nsys export --type sqlite`) into the columnar model.

Columns come out of SQLite with one query per table and go straight into numpy; names are looked up
once per distinct string id. nsys already stores integer nanoseconds, so times are only shifted.
The tables are read by `gpu` (GPU activities), `host` (host threads) and `meta` (metadata).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np

from stepscope.errors import StepscopeError
from stepscope.trace.links import link_notes
from stepscope.trace.model import NONE, Events, Kind, Trace, TraceMeta
from stepscope.trace.names import MAX_NAME_CHARS
from stepscope.trace.nsys import gpu as nsys_gpu
from stepscope.trace.nsys import host as nsys_host
from stepscope.trace.nsys import meta as nsys_meta
from stepscope.trace.nsys.db import EVENT_TABLES, NSYS_MARKER_TABLES, OSRT, OVERHEAD, Block, NsysDatabase
from stepscope.trace.repairs import repaired
from stepscope.trace.validation import MAX_SPAN_NS, launches_without_kernels


def read_nsys(path: str | Path) -> Trace:
    """Read one Nsight Systems SQLite export into the columnar model."""
    path = Path(path)
    if not path.exists():
        raise StepscopeError(f"{path}: no such file or folder")
    if path.is_dir():
        raise StepscopeError(f"{path}: is a folder, expected a trace file")
    if path.stat().st_size == 0:
        raise StepscopeError(f"{path}: file is empty")
    try:
        # immutable: no locks and no journal lookups, so read-only folders and copied files both work.
        uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
        with closing(sqlite3.connect(uri, uri=True)) as db:
            db.text_factory = lambda raw: raw.decode("utf-8", "replace")  # user text need not be UTF-8
            return _read(NsysDatabase(db, path))
    except sqlite3.Error as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise StepscopeError(f"{path}: not a readable SQLite database ({message[:200]})") from None
    except (TypeError, ValueError, OverflowError) as exc:  # a value of a type no export holds where we read it
        raise StepscopeError(f"{path}: the export holds values Nsight Systems does not write "
                             f"({type(exc).__name__}: {str(exc)[:200]})") from None


def _read(ex: NsysDatabase) -> Trace:
    present = [t for t in EVENT_TABLES if t in ex.tables]
    if not present:
        if any(t in ex.tables for t in NSYS_MARKER_TABLES):
            raise StepscopeError(
                f"{ex.path}: the Nsight Systems export holds no CUDA, NVTX or OS runtime events",
                hint="record with: nsys profile -t cuda,nvtx,osrt ...",
            )
        raise StepscopeError(
            f"{ex.path}: not an Nsight Systems export "
            "(no CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS or OSRT_API tables)",
            hint="export a report with: nsys export --type sqlite --output report.sqlite report.nsys-rep",
        )
    readers = (nsys_gpu.kernels, nsys_gpu.memcpys, nsys_gpu.memsets, nsys_gpu.syncs, nsys_host.runtime_calls,
               nsys_host.nvtx_ranges, lambda ex: nsys_host.host_calls(ex, OSRT),
               lambda ex: nsys_host.host_calls(ex, OVERHEAD))
    blocks = [b for b in (read(ex) for read in readers) if b]
    if not sum(len(b["start"]) for b in blocks):
        raise StepscopeError(f"{ex.path}: the export has no events with a duration (nothing to read)")
    return _assemble(ex, blocks)


def _assemble(ex: NsysDatabase, blocks: list[Block]) -> Trace:
    names = dict.fromkeys(k for b in blocks for k in b)
    columns = _plausible(ex, {k: np.concatenate([_column(b, k) for b in blocks]) for k in names})
    end = columns.pop("end")
    open_ranges = end < 0  # NVTX ranges still open when the capture stopped
    if open_ranges.any():
        end[open_ranges] = max(int(end.max()), int(columns["start"].max()))
        count = int(open_ranges.sum())
        ex.notes.append(f"{count} NVTX ranges were still open when the capture stopped: "
                        "they end at the trace end")
    _scope_correlations(ex, columns)
    columns.pop("process", None)
    start = columns.pop("start")
    t0 = int(start.min())
    events = repaired(Events.from_columns(start=start - t0, dur=end - start, **columns), tuple(ex.strings), ex.notes)
    host = np.flatnonzero(events.device < 0)
    cuda = events.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.RUNTIME).any()
    devices = nsys_meta.devices(ex)
    if cuda and not devices:
        ex.notes.append("the export has no GPU description (TARGET_INFO_GPU): "
                        "device name and limits are unknown")
    nsys_meta.sampling_note(ex)
    if ex.shortened_names:
        ex.notes.append(f"{ex.shortened_names} names longer than {MAX_NAME_CHARS:,} characters were shortened "
                        "(their first characters and a hash are kept)")
    if ex.unknown_names:
        where = "the export has no StringIds table" if "StringIds" not in ex.tables else "StringIds lacks their ids"
        ex.notes.append(f"{ex.unknown_names:,} events have no name ({where}): they cannot be recognised as syncs, "
                        "collectives or steps, and count by their kind alone")
    if note := launches_without_kernels(events, tuple(ex.strings)):
        ex.notes.append(note)
    ex.notes.extend(link_notes(events, tuple(ex.strings)))
    process_names, thread_names = nsys_meta.thread_names(ex, events.pid[host], events.tid[host])
    epoch = nsys_meta.session_start(ex)
    meta = TraceMeta(
        path=str(ex.path),
        format="nsys",
        devices=tuple(devices),
        accelerator="cuda" if cuda else "none",
        start_epoch_ns=epoch + t0 if epoch is not None else None,
        process_names=process_names,
        thread_names=thread_names,
        notes=tuple(ex.notes),
    )
    return Trace(meta=meta, events=events, strings=tuple(ex.strings))


def _plausible(ex: NsysDatabase, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Leave out rows whose start lies further than MAX_SPAN_NS from the export's median start, or whose
    duration is negative or longer than that: no clock produces them, and they would poison every figure."""
    start, end = columns["start"].astype(np.float64), columns["end"].astype(np.float64)
    still_open = columns["end"] < 0  # an NVTX range the capture stopped inside: closed at the trace end
    keep = (np.abs(start - np.median(start)) <= MAX_SPAN_NS) & (
        still_open | ((end >= start) & (end - start <= MAX_SPAN_NS)))
    if keep.all():
        return columns
    bad = start[~keep]
    worst = bad[np.argmax(np.abs(bad - np.median(start)))]
    ex.notes.append(f"{int((~keep).sum())} rows with a start or duration out of range (e.g. start {worst:.4g} ns) "
                    "were left out")
    return {k: v[keep] for k, v in columns.items()}


def _scope_correlations(ex: NsysDatabase, columns: dict[str, np.ndarray]) -> None:
    """CUPTI correlation ids count per process: with several CUDA processes, put the process in the id."""
    if "correlation" not in columns or "process" not in columns:
        return  # no CUDA tables: nothing to link
    corr, process = columns["correlation"], columns["process"]
    linked = (corr >= 0) & (process >= 0)
    processes = np.unique(process[linked])
    if len(processes) > 1:
        corr[linked] = (process[linked] << 32) | corr[linked]
        ex.notes.append(f"{len(processes)} processes recorded CUDA activity: correlation ids are "
                        "process id << 32 | CUPTI correlation id")


def _column(block: Block, name: str) -> np.ndarray:
    """A block's column, or the model's "absent" value where the table has none."""
    if name in block:
        return block[name]
    return np.full(len(block["start"]), 0 if name in ("copy_kind", "host_memory") else NONE,
                   dtype=np.int8 if name in ("copy_kind", "host_memory") else np.int64)
