"""A seeded generator of hostile inputs for stepscope: mangled Kineto traces and Nsight Systems exports, and
mangled report.json files, each with the command line that feeds it to the CLI.

Case `i` of seed `s` depends on nothing but (s, i), so any failure is reproduced by its number. Damage comes
in layers: structural (wrong types, missing keys, NaN, impossible times, deep nesting, long and hostile
names, mangled steps and device properties), then bytes (truncation, bit flips, a BOM, bytes that are not
UTF-8), then the container (plain, gzip, cut gzip). Nsight exports are built by tests/nsys_builder.py and
mangled with SQL (dropped tables, hostile values, long and invalid names) or as bytes.
"""

from __future__ import annotations

import copy
import gzip
import json
import random
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import builder
from nsys_builder import training_loop

# -- values and names a hostile or broken producer writes ---------------------------------------------------

HOSTILE_NAMES = (
    "<script>alert(1)</script>", "[bold red]markup[/]", "[/]", "\x1b[31mred\x1b[0m", "a\x00b", "line\nbreak",
    "{0}%s%n{name}", "../../etc/passwd", "\u202eevil\u202c", "\u200b", "e\u0301" * 50, "\U0001f600" * 20,
    "ProfilerStep#1", "ProfilerStep#", "## forward ##", "enumerate(DataLoader)#x.__next__", "nccl:all_reduce",
    "Memcpy HtoD (Pageable -> Device)", "cudaStreamSynchronize", "", " ", "\\", '"', "\ud800",
)
EVENT_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "s")
ARG_KEYS = ("External id", "correlation", "device", "stream", "bytes", "flops", "Sequence number",
            "Fwd thread id", "Bytes", "Total Allocated", "Device Type", "Device Id", "name")
CATEGORIES = ("kernel", "cuda_runtime", "cpu_op", "user_annotation", "gpu_memcpy", "gpu_memset", "cuda_sync",
              "python_function", "gpu_user_annotation", "Trace", "mtia_runtime", "Kernel", "Operator", "bogus")


def hostile_value(rng: random.Random) -> Any:
    pick = rng.randrange(16)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice([True, False])
    if pick == 2:
        return rng.choice([2**70, -2**62, 2**63 - 1, -1, 0, 10**30])
    if pick == 3:
        return rng.choice([float("nan"), float("inf"), float("-inf"), 1e300, -0.0, 5e-324])
    if pick == 4:
        return rng.choice(["12", "0x1f", "-", "1e3", "NaN", "inf", ""])
    if pick == 5:
        return [rng.random(), "x", None]
    if pick == 6:
        return {"nested": {"deeper": [1, 2, {"x": None}]}}
    if pick == 7:
        return nested(rng.choice([10, 100, 1000, 100_000]))
    if pick == 8:
        return long_name(rng)
    if pick == 9:
        return rng.choice(HOSTILE_NAMES)
    return rng.uniform(-1e6, 1e12) if pick < 13 else rng.randrange(-5, 1 << 40)


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(min(depth, 200)):  # deeper levels are added as text when serialised (see NESTED_MARK)
        value = [value]
    return value if depth <= 200 else NESTED_MARK + str(depth)


NESTED_MARK = "@@nested@@"


def long_name(rng: random.Random) -> str:
    size = rng.choice([5_000, 50_000, 1_000_000, 2_000_000])
    return rng.choice(["k", "ab", "<script>", "\U0001f600"]) * (size // 4) + str(rng.random())


# -- Kineto -----------------------------------------------------------------------------------------------

SCENARIOS: tuple[Callable[[], builder.TraceBuilder], ...] = (
    builder.gpu_bound_trace, builder.launch_bound_trace, builder.sync_bound_trace, builder.cpu_bound_trace,
    builder.input_bound_trace, builder.copy_bound_trace, builder.communication_bound_trace,
)
_BASES: dict[int, dict[str, Any]] = {}


def base_trace(index: int) -> dict[str, Any]:
    if index not in _BASES:
        _BASES[index] = SCENARIOS[index]().to_dict()
    return copy.deepcopy(_BASES[index])


def mangle_event(rng: random.Random, doc: dict[str, Any]) -> str:
    events = doc.get("traceEvents")
    if not isinstance(events, list) or not events:
        return "none"
    ev = rng.choice(events)
    if not isinstance(ev, dict):
        return "none"
    how = rng.randrange(9)
    if how == 0:
        ev[rng.choice(EVENT_KEYS)] = hostile_value(rng)
    elif how == 1:
        ev.pop(rng.choice(EVENT_KEYS), None)
    elif how == 2 and isinstance(ev.get("args"), dict):
        ev["args"][rng.choice(ARG_KEYS)] = hostile_value(rng)
    elif how == 3:
        ev["args"] = hostile_value(rng)
    elif how == 4:
        ev["name"] = rng.choice([long_name(rng), rng.choice(HOSTILE_NAMES)])
    elif how == 5:
        ev["cat"] = rng.choice(CATEGORIES)
    elif how == 6:
        ev["ts"], ev["dur"] = rng.choice([(2**70, 1), (-2**62, 5), (1e15, -3), (0, 1e300), (float("nan"), 1)])
    elif how == 7:
        ev["ph"] = rng.choice("XiIMBEbsfCP")
    else:
        events.append(copy.deepcopy(ev))
    return f"event:{how}"


def mangle_steps(rng: random.Random, doc: dict[str, Any]) -> str:
    steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    how = rng.randrange(5)
    for e in steps:
        if how == 0:
            e["dur"] = 0
        elif how == 1:
            e["name"] = "ProfilerStep#1"
        elif how == 2 and rng.random() < 0.5:
            e["cat"] = "kernel"
    if how == 3:
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e not in steps]
    if how == 4 and steps:
        inner = dict(rng.choice(steps), name="ProfilerStep#999", cat="cpu_op")
        inner["dur"] = inner["dur"] / 3
        doc["traceEvents"].append(inner)
    return f"steps:{how}"


def mangle_top(rng: random.Random, doc: dict[str, Any]) -> Any:
    how = rng.randrange(10)
    if how == 0 and doc.get("deviceProperties"):
        doc["deviceProperties"][0][rng.choice(["numSms", "name", "totalGlobalMem", "computeMajor", "id"])] = \
            hostile_value(rng)
    elif how == 1:
        doc["deviceProperties"] = hostile_value(rng)
    elif how == 2:
        doc["distributedInfo"] = {"rank": hostile_value(rng), "world_size": hostile_value(rng)}
    elif how == 3:
        return doc["traceEvents"]  # a bare event list
    elif how == 4:
        doc["traceEvents"] = hostile_value(rng)
    elif how == 5:
        rng.shuffle(doc["traceEvents"])
    elif how == 6:
        doc["traceEvents"] = doc["traceEvents"] * 3
    elif how == 7:
        doc["baseTimeNanoseconds"] = hostile_value(rng)
    elif how == 8:
        doc["nodes"] = []
        doc.pop("traceEvents")
    return doc


def serialise(rng: random.Random, doc: Any) -> bytes:
    text = json.dumps(doc, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, None, 1]))
    while NESTED_MARK in text:  # very deep nesting, written as text: json.dumps would recurse
        at = text.index(NESTED_MARK)
        end = text.index('"', at)
        depth = int(text[at + len(NESTED_MARK) : end])
        text = text[: at - 1] + "[" * depth + "]" * depth + text[end + 1 :]
    return text.encode("utf-8", "surrogatepass")


def damage_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    how = rng.randrange(8)
    if how == 0 and data:
        return data[: rng.randrange(len(data))], "truncate"
    if how == 1 and data:
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 20)):
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        return bytes(flipped), "bitflip"
    if how == 2:
        return b"\xef\xbb\xbf" + data, "bom"
    if how == 3:
        return data.replace(b'"name": "', b'"name": "\xff\xfe\xc3', rng.randint(1, 5)), "bad-utf8"
    if how == 4:
        return data.replace(b"1", b"NaN", 1), "nan-token"
    if how == 5 and data:
        at = rng.randrange(len(data))
        return data[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))) + data[at:], "insert"
    return data, "clean"


def container(rng: random.Random, data: bytes) -> tuple[bytes, str, str]:
    """(file bytes, file name, how): plain JSON, gzip, cut gzip, gzip with flipped bits, or random bytes."""
    how = rng.randrange(8)
    if how in (0, 1, 2):
        return data, "trace.json", "json"
    packed = gzip.compress(data, compresslevel=1, mtime=0)
    if how in (3, 4):
        return packed, "trace.json.gz", "gzip"
    if how == 5:
        return packed[: rng.randrange(1, len(packed))], "trace.json.gz", "gzip-cut"
    if how == 6:
        flipped = bytearray(packed)
        flipped[rng.randrange(10, len(flipped))] ^= 0xFF
        return bytes(flipped), "trace.json.gz", "gzip-flip"
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, 4096))), rng.choice(
        ["trace.json", "trace.json.gz", "trace.sqlite"]), "random"


@dataclass
class Case:
    """One input: the files to write into the case's folder, and the CLI arguments ({dir} is that folder)."""

    index: int
    family: str
    damage: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)


def kineto_case(rng: random.Random, index: int) -> Case:
    doc = base_trace(rng.randrange(len(SCENARIOS)))
    damage = []
    for _ in range(rng.randint(0, 4)):
        damage.append(mangle_event(rng, doc))
    if rng.random() < 0.25:
        damage.append(mangle_steps(rng, doc))
    top: Any = doc
    if rng.random() < 0.3:
        top = mangle_top(rng, doc)
        damage.append("top")
    data = serialise(rng, top)
    if rng.random() < 0.4:
        data, how = damage_bytes(rng, data)
        damage.append(how)
    data, name, how = container(rng, data)
    damage.append(how)
    case = Case(index, "kineto", damage, {name: data})
    case.argv = cli_for(rng, "{dir}/" + name)
    return case


def cli_for(rng: random.Random, path: str) -> list[str]:
    pick = rng.random()
    if pick < 0.6:
        return ["analyze", path, "--width", "100"]
    if pick < 0.72:
        return ["analyze", "-q", path, "--json", "{dir}/out.json", "--html", "{dir}/out.html"]
    if pick < 0.82:
        return ["analyze", "-q", path, "--perfetto", "{dir}/out.json.gz"]
    if pick < 0.9:
        return ["analyze", path, "--step-range", rng.choice(HOSTILE_NAMES[:12]), "--batch-size", "8"]
    if pick < 0.95:
        return ["diff", "-q", path, path, "--fail-if-slower", "5"]
    return ["analyze", "--json", "-", path]


# -- Nsight Systems -----------------------------------------------------------------------------------------

NSYS_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS", "StringIds",
               "ThreadNames", "TARGET_INFO_GPU", "PROCESSES", "OSRT_API", "ENUM_CUDA_MEMCPY_OPER")
NSYS_COLUMNS = ("start", "end", "streamId", "correlationId", "globalPid", "globalTid", "deviceId",
                "demangledName", "shortName", "nameId", "copyKind", "srcKind", "bytes", "eventType", "text",
                "domainId", "value", "id", "smCount", "name", "syncType", "eventId")
SQL_VALUES = ("NULL", str(-2**62), str(2**63 - 1), "-1", "0", "'abc'", "x'ff00fe'", "1e300", "-5.5",
              "CAST(x'fffe41' AS TEXT)", "'" + "n" * 100_000 + "'", "9223372036854775807 * 2")


def nsys_case(rng: random.Random, index: int, scratch: Path) -> Case:
    path = scratch / f"nsys-{index}.sqlite"
    path.unlink(missing_ok=True)
    training_loop(steps=3, kernels_per_step=6, enums=rng.random() < 0.5).write(path)
    damage = []
    with closing(sqlite3.connect(path)) as db:
        for _ in range(rng.randint(1, 4)):
            damage.append(mangle_sql(rng, db))
        db.commit()
    data = path.read_bytes()
    path.unlink()
    if rng.random() < 0.2:
        data, how = damage_bytes(rng, data)
        damage.append(how)
    case = Case(index, "nsys", damage, {"export.sqlite": data})
    case.argv = cli_for(rng, "{dir}/export.sqlite")
    return case


def mangle_sql(rng: random.Random, db: sqlite3.Connection) -> str:
    tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    table = rng.choice(tables)
    how = rng.randrange(6)
    try:
        if how == 0:
            db.execute(f'DROP TABLE "{table}"')
        elif how in (1, 2):
            columns = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
            column = rng.choice([c for c in columns if c in NSYS_COLUMNS] or columns)
            where = "" if how == 2 else f" WHERE rowid % {rng.randint(2, 7)} = 0"
            _loosen(db, table)
            db.execute(f'UPDATE "{table}" SET "{column}" = {rng.choice(SQL_VALUES)}{where}')
        elif how == 3 and "StringIds" in tables:
            value = rng.choice(["'" + "k" * rng.choice([5_000, 1_000_000]) + "'", "CAST(x'ff41fe' AS TEXT)",
                                "'<script>alert(1)</script>'", "'[/]'", "NULL"])
            _loosen(db, "StringIds")
            db.execute(f"UPDATE StringIds SET value = {value} WHERE id % 3 = 0")
        elif how == 4:
            db.execute(f'INSERT INTO "{table}" SELECT * FROM "{table}"')  # every row twice
        else:
            db.execute(f'DROP TABLE "{table}"')
            db.execute(f'CREATE TABLE "{table}" (x TEXT)')
            db.execute(f"INSERT INTO \"{table}\" VALUES ('junk')")
    except sqlite3.Error:
        return f"sql:{how}:refused"
    return f"sql:{how}:{table}"


def _loosen(db: sqlite3.Connection, table: str) -> None:
    """Copy the table without its NOT NULL constraints, so any value can be written into it."""
    db.execute(f'CREATE TABLE "loose_{table}" AS SELECT * FROM "{table}"')
    db.execute(f'DROP TABLE "{table}"')
    db.execute(f'ALTER TABLE "loose_{table}" RENAME TO "{table}"')


# -- report.json ---------------------------------------------------------------------------------------------

def report_case(rng: random.Random, index: int, report_json: bytes) -> Case:
    doc = json.loads(report_json)
    damage = []
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(sorted(doc))
        if rng.random() < 0.7:
            doc[key] = hostile_value(rng)
        else:
            del doc[key]
        damage.append(f"field:{key}")
    data = serialise(rng, doc)
    if rng.random() < 0.4:
        data, how = damage_bytes(rng, data)
        damage.append(how)
    verb = rng.choice([["report", "{dir}/report.json"], ["report", "{dir}", "--html", "{dir}/page.html"],
                       ["diff", "{dir}/report.json", "{dir}/report.json"], ["report", "--json", "-", "{dir}"]])
    return Case(index, "report", damage, {"report.json": data}, verb)


def make_case(seed: int, index: int, scratch: Path, report_json: bytes) -> Case:
    rng = random.Random(f"{seed}:{index}")
    pick = rng.random()
    if pick < 0.7:
        return kineto_case(rng, index)
    if pick < 0.9:
        return nsys_case(rng, index, scratch)
    return report_case(rng, index, report_json)
