"""The DataLoader workers' estimate against plain runs (issue 41.5), for `bench_estimates.py --loaders`:

each workload of benchmarks/loader_workloads.py (the sleep-waiting loader, the 32 MB-batch one) is run under
`stepscope run` at num_workers=0 for the diagnosis' dataloader_workers estimate and the worker count it names (N),
then plain, alternating, at 0 and at N workers (persistent): the measured gain is the ratio of the medians of the
rounds' median steps, beside the rounds' spread. Timings on a shared machine move: the ratios are within one run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ROOT / "benchmarks" / "loader_workloads.py"
STEPSCOPE = Path(sys.executable).with_name("stepscope")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def diagnosed(name: str, folder: Path) -> tuple[float | None, int | None, bool]:
    """(estimate, suggested workers, recommended) of dataloader_workers, from `stepscope run` at 0 workers."""
    subprocess.run([str(STEPSCOPE), "run", "--skip", "10", "--steps", "4", "--no-calibrate", "-o", str(folder), "-f",
                    str(WORKLOADS), name, "--steps", "40"], env=ENV, check=True, capture_output=True)
    report = json.loads((folder / "report.json").read_text())
    for key, recommended in (("recommendations", True), ("considered", False)):
        for rec in report.get(key) or []:
            if rec["id"] == "dataloader_workers":
                return rec.get("estimated_speedup"), (rec.get("evidence") or {}).get("suggested_workers"), recommended
    return None, None, False


def plain_ms(name: str, workers: int, out: Path, steady: int = 25) -> float:
    """The median step (ms) of one plain run's `steady` last steps: the first 5 (start-up) and the batches the
    workers made ahead while it started (prefetch_factor 2 each) left out."""
    ahead = 5 + 2 * workers
    args = [sys.executable, str(WORKLOADS), name, "--workers", str(workers), "--steps", str(ahead + steady),
            "--times", str(out)]
    subprocess.run(args + (["--persistent"] if workers else []), env=ENV, check=True, capture_output=True)
    return statistics.median(json.loads(out.read_text())["wall"][ahead:]) / 1e6


def loader_rows(rounds: int = 3) -> list[dict]:
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("sleep", "bigbatch"):
            est, workers, recommended = diagnosed(name, Path(tmp) / f"run-{name}")
            n = workers or 2
            base, fixed = [], []
            for i in range(rounds):  # alternating, so a change in the machine's load falls on both
                base.append(plain_ms(name, 0, Path(tmp) / f"{name}-0-{i}.json"))
                fixed.append(plain_ms(name, n, Path(tmp) / f"{name}-{n}-{i}.json"))
            gains = [b / f for b, f in zip(base, fixed, strict=True)]
            measured = statistics.median(base) / statistics.median(fixed)
            found.append({"workload": name, "workers": n, "estimate": est, "recommended": recommended,
                          "measured": measured, "spread": (min(gains), max(gains)),
                          "base_ms": statistics.median(base), "fixed_ms": statistics.median(fixed)})
    return found


def loader_table(found: list[dict]) -> list[str]:
    lines = ["| workload (CPU) | workers named | estimated | measured plain (0 -> N, persistent) | rounds' range | "
             "estimate / measured |", "|---|---|---|---|---|---|"]
    for r in found:
        est = "none" if r["estimate"] is None else f"{r['estimate']:.2f}x" + ("" if r["recommended"] else
                                                                              " (considered, not recommended)")
        ratio = f"{r['estimate'] / r['measured']:.2f}" if r["estimate"] else "-"
        lines.append(f"| {r['workload']} | {r['workers']} | {est} | {r['measured']:.2f}x ({r['base_ms']:.1f} -> "
                     f"{r['fixed_ms']:.1f} ms) | {r['spread'][0]:.2f}-{r['spread'][1]:.2f}x | {ratio} |")
    return lines
