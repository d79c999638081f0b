"""Time the nsys reader on a generated export of a million kernels, against a bare SQLite fetch.

The baseline fetches the same raw columns with `fetchall()`, the least any reader must do, in the
same process; the ratio says what the reader adds on top. Run from the repository root:

    .venv/bin/python benchmarks/bench_nsys.py [--kernels 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from nsys_builder import many_kernels
from stepscope.trace.nsys import read_nsys

RAW_QUERIES = (
    "SELECT start, end, deviceId, streamId, correlationId, globalPid, demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL",
    "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME",
)


def bare_fetch(path: Path) -> int:
    """Every raw value the reader needs, as Python rows, and nothing else."""
    with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)) as db:
        return sum(len(db.execute(query).fetchall()) for query in RAW_QUERIES)


def best_of(repeat: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-") as tmp:
        start = time.perf_counter()
        path = many_kernels(Path(tmp) / "kernels.sqlite", args.kernels)
        built = time.perf_counter() - start
        events = len(read_nsys(path).events)  # also warms the file cache
        baseline = best_of(args.repeat, lambda: bare_fetch(path))
        reader = best_of(args.repeat, lambda: read_nsys(path))
        size_mb = path.stat().st_size / 1e6
    print(f"export: {args.kernels:,} kernels + {args.kernels:,} cudaLaunchKernel calls, {size_mb:.0f} MB, "
          f"built in {built:.1f} s")
    print(f"read_nsys: {reader:.2f} s for {events:,} events = {events / reader / 1e6:.2f} M events/s "
          f"(best of {args.repeat})")
    print(f"bare fetchall of the same columns: {baseline:.2f} s; reader / bare fetch = {reader / baseline:.2f}")


if __name__ == "__main__":
    main()
