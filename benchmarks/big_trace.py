"""A large Kineto trace made from a real one: its events repeated with shifted times and ids, as a longer
recording of the same job would be.

    .venv/bin/python benchmarks/big_trace.py OUT.json.gz [--gb 1.0] [--source TRACE]

Repetition k shifts every timestamp by k times the source's span (plus a gap), every correlation id, External id
and flow id by k times an id stride, and renumbers ProfilerStep#N to N + k * 1000, so the steps stay distinct
and every launch keeps exactly one kernel. Written as gzip (level 1) without holding the whole text: the JSON
is what the ratios are taken against, its size is printed. Only the standard library and msgspec are used.
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from pathlib import Path

import msgspec

HERE = Path(__file__).resolve().parent
SOURCE = (HERE.parent / ".." / "shared" / "traces" / "kineto" / "v100_ddp_train_rank1.json.gz").resolve()
STEP = re.compile(r"^ProfilerStep#(\d+)$")
ID_ARGS = ("correlation", "External id", "external id")


def make(out: Path, gigabytes: float, source: Path = SOURCE) -> tuple[int, int]:
    """Write the trace; returns (bytes of JSON, events)."""
    doc = msgspec.json.decode(gzip.decompress(source.read_bytes()))
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + (e.get("dur") or 0) for e in timed) - min(e["ts"] for e in timed)
    stride = 1 + max(int(v) for e in events for v in _ids(e))
    one = len(msgspec.json.encode(events))
    repeats = max(1, round(gigabytes * 1e9 / one))
    head = msgspec.json.encode(doc)[:-1] + b', "traceEvents": ['  # the rest of the top level first
    written, count = len(head), 0
    with gzip.open(out, "wb", compresslevel=1) as f:
        f.write(head)
        for k in range(repeats):
            shifted = [_shift(e, k, k * (span + 1000.0), k * stride) for e in events]
            text = msgspec.json.encode(shifted)[1:-1]
            if k:
                text = b",\n" + text
            f.write(text)
            written += len(text)
            count += len(shifted)
        f.write(b"]}")
    return written + 2, count


def _ids(event: dict) -> list:
    args = event.get("args") if isinstance(event.get("args"), dict) else {}
    found = [args[k] for k in ID_ARGS if isinstance(args.get(k), int)]
    if isinstance(event.get("id"), int):
        found.append(event["id"])
    return found or [0]


def _shift(event: dict, k: int, dt: float, di: int) -> dict:
    if not k:
        return event
    event = dict(event)
    if isinstance(event.get("ts"), (int, float)):
        event["ts"] = event["ts"] + dt
    if isinstance(event.get("id"), int):
        event["id"] += di
    args = event.get("args")
    if isinstance(args, dict) and any(key in args for key in ID_ARGS):
        args = dict(args)
        for key in ID_ARGS:
            if isinstance(args.get(key), int) and args[key] > 0:
                args[key] += di
        event["args"] = args
    name = event.get("name")
    if isinstance(name, str) and (m := STEP.match(name)):
        event["name"] = f"ProfilerStep#{int(m.group(1)) + 1000 * k}"
    return event


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--gb", type=float, default=1.0, help="JSON size to reach, in GB (10^9 bytes)")
    p.add_argument("--source", type=Path, default=SOURCE)
    args = p.parse_args()
    size, events = make(args.out, args.gb, args.source)
    print(f"{args.out}: {events:,} events, {size / 1e9:.2f} GB of JSON")
    return 0


if __name__ == "__main__":
    sys.exit(main())
