"""Broken links, kind by kind: the damage a real producer or a careless tool does to the fields the analysis
relies on (launch <-> kernel correlation, runtime events, kernel names, string tables, step ranges, timestamps
ordered), applied to traces whose verdict is known, and a check that nothing changed silently.

Each kind is a function that mangles one unmangled trace (a Kineto document from tests/builder.py's
scenarios, or an Nsight Systems export from tests/nsys_builder.py's training loop). The promise checked: the
mangled trace's report has the original's primary pattern and step time, or it carries a note the original
has not, naming the field (`NOTE_WORDS`). Case (kind, scenario, seed) depends on nothing else.
"""

from __future__ import annotations

import copy
import random
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import builder
from nsys_builder import DEVICE_MEMORY, DTOH, KERNEL_NAMES, PAGEABLE, STREAM, STREAM_SYNC, NsysBuilder, training_loop

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
SCENARIOS: dict[str, Callable[[], builder.TraceBuilder]] = {
    "gpu_bound": builder.gpu_bound_trace, "launch_bound": builder.launch_bound_trace,
    "sync_bound": builder.sync_bound_trace, "cpu_bound": builder.cpu_bound_trace,
    "input_bound": builder.input_bound_trace, "copy_bound": builder.copy_bound_trace,
    "communication_bound": builder.communication_bound_trace,
}
_DOCS: dict[str, dict[str, Any]] = {}


def scenario_doc(name: str) -> dict[str, Any]:
    if name not in _DOCS:
        _DOCS[name] = SCENARIOS[name]().to_dict()
    return copy.deepcopy(_DOCS[name])


def _some(rng: random.Random, items: list) -> list:
    """All of them, or a random part (at least one): links break wholesale (a tool) or here and there."""
    if not items or rng.random() < 0.5:
        return items
    return rng.sample(items, rng.randint(1, len(items)))


def _of(doc: dict[str, Any], *cats: str) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("cat") in cats]


# -- Kineto kinds: doc -> None, in place -----------------------------------------------------------------

def kernel_correlation_missing(rng: random.Random, doc: dict[str, Any]) -> None:
    for e in _some(rng, _of(doc, *GPU_CATS)):
        e["args"].pop("correlation", None)


def runtime_correlation_missing(rng: random.Random, doc: dict[str, Any]) -> None:
    for e in _some(rng, _of(doc, "cuda_runtime")):
        e["args"].pop("correlation", None)


def correlation_as_string(rng: random.Random, doc: dict[str, Any]) -> None:
    for e in _some(rng, [e for e in doc["traceEvents"] if "correlation" in e.get("args", {})]):
        e["args"]["correlation"] = str(e["args"]["correlation"])


def runtime_missing(rng: random.Random, doc: dict[str, Any]) -> None:
    gone = {id(e) for e in _some(rng, _of(doc, "cuda_runtime"))}
    doc["traceEvents"] = [e for e in doc["traceEvents"] if id(e) not in gone]


def kernel_name_missing(rng: random.Random, doc: dict[str, Any]) -> None:
    for e in _some(rng, _of(doc, "kernel")):
        if rng.random() < 0.5:
            e.pop("name")
        else:
            e["name"] = ""


def gpu_args_missing(rng: random.Random, doc: dict[str, Any]) -> None:
    for e in _some(rng, _of(doc, *GPU_CATS)):
        e.pop("args")


def steps_overlap(rng: random.Random, doc: dict[str, Any]) -> None:
    """Each ProfilerStep range runs on into the next one (a step annotation closed late)."""
    steps = sorted((e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    for a, b in pairwise(steps):
        a["dur"] = (b["ts"] - a["ts"]) + b["dur"] * rng.uniform(0.2, 0.8)


def events_shuffled(rng: random.Random, doc: dict[str, Any]) -> None:
    rng.shuffle(doc["traceEvents"])


def times_as_strings(rng: random.Random, doc: dict[str, Any]) -> None:
    for e in _some(rng, doc["traceEvents"]):
        e["ts"] = str(e["ts"])
        if "dur" in e:
            e["dur"] = str(e["dur"])


def duration_missing(rng: random.Random, doc: dict[str, Any]) -> None:
    for e in _some(rng, _of(doc, *GPU_CATS, "cuda_runtime")):
        e.pop("dur")


def category_unknown(rng: random.Random, doc: dict[str, Any]) -> None:
    for e in _some(rng, _of(doc, *GPU_CATS)):
        e["cat"] = rng.choice(["bogus", "", None])


def events_duplicated(rng: random.Random, doc: dict[str, Any]) -> None:
    doc["traceEvents"] = [copy.deepcopy(e) for e in doc["traceEvents"] for _ in range(2)]


def host_thread_missing(rng: random.Random, doc: dict[str, Any]) -> None:
    for e in _some(rng, _of(doc, "cuda_runtime", "cpu_op")):
        e.pop(rng.choice(["pid", "tid"]))


KINETO_KINDS: dict[str, Callable[[random.Random, dict[str, Any]], None]] = {
    f.__name__: f for f in (kernel_correlation_missing, runtime_correlation_missing, correlation_as_string,
                            runtime_missing, kernel_name_missing, gpu_args_missing, steps_overlap,
                            events_shuffled, times_as_strings, duration_missing, category_unknown,
                            events_duplicated, host_thread_missing)
}


# -- Nsight Systems kinds: an open export -> None ------------------------------------------------------

RUNTIME, KERNEL = "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY, SYNC = "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"


def _where(rng: random.Random) -> str:
    return "" if rng.random() < 0.5 else f" WHERE rowid % {rng.randint(2, 5)} = 0"


def _loosen(db: sqlite3.Connection, table: str) -> None:
    """The table without its NOT NULL constraints, so a NULL can be written where nsys never writes one."""
    db.execute(f'CREATE TABLE "loose_{table}" AS SELECT * FROM "{table}"')
    db.execute(f'DROP TABLE "{table}"')
    db.execute(f'ALTER TABLE "loose_{table}" RENAME TO "{table}"')


def nsys_runtime_end_before_start(rng: random.Random, db: sqlite3.Connection) -> None:
    db.execute(f"UPDATE {RUNTIME} SET start = end, end = start{_where(rng)}")


def nsys_runtime_table_missing(rng: random.Random, db: sqlite3.Connection) -> None:
    db.execute(f"DROP TABLE {RUNTIME}")


def nsys_kernel_correlation_null(rng: random.Random, db: sqlite3.Connection) -> None:
    _loosen(db, KERNEL)
    db.execute(f"UPDATE {KERNEL} SET correlationId = NULL{_where(rng)}")


def nsys_copy_correlation_null(rng: random.Random, db: sqlite3.Connection) -> None:
    _loosen(db, MEMCPY)
    db.execute(f"UPDATE {MEMCPY} SET correlationId = NULL{_where(rng)}")


def nsys_runtime_correlation_null(rng: random.Random, db: sqlite3.Connection) -> None:
    _loosen(db, RUNTIME)
    db.execute(f"UPDATE {RUNTIME} SET correlationId = NULL{_where(rng)}")


def nsys_string_ids_missing(rng: random.Random, db: sqlite3.Connection) -> None:
    db.execute("DROP TABLE StringIds")


def nsys_string_ids_null(rng: random.Random, db: sqlite3.Connection) -> None:
    _loosen(db, "StringIds")
    db.execute(f"UPDATE StringIds SET value = NULL{_where(rng)}")


def nsys_sync_table_missing(rng: random.Random, db: sqlite3.Connection) -> None:
    db.execute(f"DROP TABLE {SYNC}")


def nsys_rows_duplicated(rng: random.Random, db: sqlite3.Connection) -> None:
    for table in (RUNTIME, KERNEL, MEMCPY, SYNC):
        db.execute(f"INSERT INTO {table} SELECT * FROM {table}")


def nsys_thread_null(rng: random.Random, db: sqlite3.Connection) -> None:
    _loosen(db, RUNTIME)
    db.execute(f"UPDATE {RUNTIME} SET globalTid = NULL{_where(rng)}")


NSYS_KINDS: dict[str, Callable[[random.Random, sqlite3.Connection], None]] = {
    f.__name__: f for f in (nsys_runtime_end_before_start, nsys_runtime_table_missing, nsys_kernel_correlation_null,
                            nsys_copy_correlation_null, nsys_runtime_correlation_null, nsys_string_ids_missing,
                            nsys_string_ids_null, nsys_sync_table_missing, nsys_rows_duplicated, nsys_thread_null)
}
KINDS = (*KINETO_KINDS, *NSYS_KINDS)


def nsys_sync_loop() -> NsysBuilder:
    """Sync-bound under nsys: each step launches 0.9 ms of kernels, then `.item()` copies the loss and waits for
    it (cudaStreamSynchronize), and the host spends 0.4 ms in Python before the next launch."""
    b = NsysBuilder()
    t = 1_000_000
    for _ in range(4):
        step_start = gpu = t
        for k in range(3):
            corr = b.runtime("cudaLaunchKernel", t, t + 10_000)
            gpu = max(gpu, t + 10_000)
            b.kernel(KERNEL_NAMES[k][0], gpu, gpu + 300_000, corr, short=KERNEL_NAMES[k][1])
            gpu += 300_000
            t += 10_000
        corr = b.runtime("cudaMemcpyAsync", t, t + 5_000)  # the loss, 4 bytes to pageable memory
        b.memcpy(gpu, gpu + 1_000, corr, 4, DTOH, DEVICE_MEMORY, PAGEABLE)
        gpu, t = gpu + 1_000, t + 5_000
        corr = b.runtime("cudaStreamSynchronize", t, gpu + 2_000)
        b.sync(t + 1_000, gpu + 1_000, corr, STREAM_SYNC, stream=STREAM)
        t = gpu + 2_000 + 400_000
        b.nvtx_range("train_step", step_start, t)
    return b


NSYS_SCENARIOS: dict[str, Callable[[], NsysBuilder]] = {
    "nsys_loop": lambda: training_loop(steps=4, kernels_per_step=12), "nsys_sync": nsys_sync_loop}


# -- cases and the promise -------------------------------------------------------------------------------

def write_original(scenario: str, folder: Path) -> Path:
    """The unmangled trace of a Kineto or an Nsight scenario, by name."""
    folder.mkdir(parents=True, exist_ok=True)
    if scenario in NSYS_SCENARIOS:
        (folder / f"{scenario}.sqlite").unlink(missing_ok=True)
        return NSYS_SCENARIOS[scenario]().write(folder / f"{scenario}.sqlite")
    return SCENARIOS[scenario]().write(folder / "original.json")


def write_mangled(kind: str, scenario: str, seed: int, folder: Path) -> Path:
    """The trace of `scenario` with the damage of `kind` (seeded by (kind, scenario, seed))."""
    import json

    rng = random.Random(f"{kind}:{scenario}:{seed}")
    folder.mkdir(parents=True, exist_ok=True)
    if kind in NSYS_KINDS:
        path = folder / f"{kind}-{scenario}-{seed}.sqlite"
        path.unlink(missing_ok=True)
        NSYS_SCENARIOS[scenario]().write(path)
        with closing(sqlite3.connect(path)) as db:
            NSYS_KINDS[kind](rng, db)
            db.commit()
        return path
    doc = scenario_doc(scenario)
    KINETO_KINDS[kind](rng, doc)
    path = folder / f"{kind}-{scenario}-{seed}.json"
    path.write_text(json.dumps(doc))
    return path


@dataclass(frozen=True)
class Outcome:
    """What the promise compares: the verdict, the step time, and what the report says it could not use."""

    primary: str | None
    step_time_us: float
    steps: int
    notes: tuple[str, ...]


def outcome(report: Any) -> Outcome:
    return Outcome(primary=report.patterns[0].id if report.patterns else None,
                   step_time_us=round(float(report.summary.step_time_us or 0.0), 1),
                   steps=len(report.steps), notes=tuple(report.notes))


# What a note about each kind's damage names: the field, or the kind of record that is missing.
NOTE_WORDS: dict[str, str] = {
    "kernel_correlation_missing": "correlation", "runtime_correlation_missing": "correlation",
    "correlation_as_string": "correlation", "runtime_missing": "runtime call", "kernel_name_missing": "no name",
    "gpu_args_missing": "correlation", "steps_overlap": "step", "events_shuffled": "time",
    "times_as_strings": "time", "duration_missing": "duration", "category_unknown": "category",
    "events_duplicated": "copies", "host_thread_missing": "thread",
    "nsys_runtime_end_before_start": "end < start", "nsys_runtime_table_missing": "runtime call",
    "nsys_kernel_correlation_null": "correlation", "nsys_copy_correlation_null": "correlation",
    "nsys_runtime_correlation_null": "correlation", "nsys_string_ids_missing": "StringIds",
    "nsys_string_ids_null": "StringIds", "nsys_sync_table_missing": "sync", "nsys_rows_duplicated": "copies",
    "nsys_thread_null": "thread",
}


def silent_change(original: Outcome, mangled: Outcome, word: str) -> str | None:
    """Why the mangled report differs from the original without a new note naming `word`; None when it does
    not differ, or says so."""
    changed = []
    if mangled.primary != original.primary:
        changed.append(f"primary pattern {original.primary} -> {mangled.primary}")
    if abs(mangled.step_time_us - original.step_time_us) > max(0.5, 1e-3 * original.step_time_us):
        changed.append(f"step time {original.step_time_us} -> {mangled.step_time_us} µs")
    if mangled.steps != original.steps:
        changed.append(f"{original.steps} -> {mangled.steps} steps")
    if not changed:
        return None
    new = [n for n in mangled.notes if n not in original.notes and word in n]
    return None if new else "; ".join(changed) + f" with no new note naming {word!r}"


KINETO_SCENARIOS = tuple(SCENARIOS)
SCENARIOS_OF: dict[str, tuple[str, ...]] = {k: KINETO_SCENARIOS for k in KINETO_KINDS} | {
    k: tuple(NSYS_SCENARIOS) for k in NSYS_KINDS}
