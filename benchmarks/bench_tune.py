"""How far stepscope's estimated gains are from the gains `stepscope tune` measures, on the examples.

    .venv/bin/python benchmarks/bench_tune.py                    # every case: about 20-40 minutes on 2 cores
    .venv/bin/python benchmarks/bench_tune.py --cases input_io   # one case
    .venv/bin/python benchmarks/bench_tune.py --write docs/tune.md

For each example configuration:

1. `stepscope tune` with its default plan (the ladder a user gets), within --budget;
2. for every fix the baseline's diagnosis gave an estimate for, `stepscope tune --fixes ID` alone, so that the
   fix is measured against the unmodified program, which is what its estimate is about (in the ladder a fix
   builds on the fixes kept before it). For a fix tried with several settings (worker counts), the best.

The table: the estimate, the measured speed-up with its standard error, their ratio (estimate / measured: above
1 the estimate promised too much), and whether the fix was kept. With --write the table and the ladders
replace the part of the given markdown file between `<!-- bench_tune:start -->` and `<!-- bench_tune:end -->`.
Prints; exits 0 unless a tune could not run at all.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES: dict[str, list[str]] = {
    "input_io": ["examples/pattern_input_bound.py", "--work", "0", "--io-ms", "0.5", "--steps", "80"],
    "input_cpu": ["examples/pattern_input_bound.py", "--steps", "80"],
    "cifar_cpu": ["examples/cifar_resnet.py", "--image-size", "32", "--steps", "60", "--num-images", "2000"],
    "launch": ["examples/pattern_launch_bound.py", "--steps", "60"],
    "mlp": ["examples/pattern_gpu_compute_bound.py", "--steps", "40"],
}
START, END = "<!-- bench_tune:start -->", "<!-- bench_tune:end -->"


def tune(command: list[str], extra: list[str], budget: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tune"
        cmd = [sys.executable, "-m", "stepscope", "tune", "--out", str(out), "--budget", budget, *extra, *command]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        path = out / "tune.json"
        if not path.exists():
            raise SystemExit(f"tune failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-3000:]}")
        doc = json.loads(path.read_text())
        report = out / "baseline" / "report.json"
        doc["_recommendations"] = json.loads(report.read_text())["recommendations"] if report.exists() else []
        return doc


def measured_alone(doc: dict, fix: str) -> dict | None:
    """The best trial of `fix` against the baseline (a chain of settings counts from the baseline)."""
    trials = [t for t in doc["trials"] if fix in t["tried"] and t["speedup"] is not None]
    return max(trials, key=lambda t: t["speedup"]) if trials else None


def run_case(name: str, command: list[str], budget: str) -> dict:
    started = time.monotonic()
    ladder = tune(command, [], budget)
    estimates: dict[str, float] = {}
    for rec in ladder["_recommendations"]:
        if rec.get("estimated_speedup"):
            estimates.setdefault(rec["id"], rec["estimated_speedup"])
    rows = []
    for fix, estimate in estimates.items():
        first = next((t for t in ladder["trials"] if fix in t["tried"]), None)
        if first is not None and first["builds_on"] == 0:
            doc = ladder  # tried first, on the baseline: no second tune needed
        else:
            doc = tune(command, ["--fixes", fix, "--allow-batch-change"], budget)
        best = measured_alone(doc, fix)
        skipped = next((n for n in doc["not_tried"] if fix in n["id"].split("+")), None)
        rows.append({"case": name, "fix": fix, "estimate": estimate,
                     "measured": best["speedup"] if best else None, "se": best["spread"] if best else None,
                     "kept": best["accepted"] if best else False,
                     "params": best["params"].get(fix) if best else None,
                     "why": (best["reason"] if best else (skipped["reason"] if skipped else "not tried"))})
    return {"case": name, "command": command, "ladder": ladder, "rows": rows,
            "seconds": round(time.monotonic() - started)}


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    import torch

    return (f"{model}, {os.cpu_count()} cores, no GPU; torch {torch.__version__}, Python "
            f"{platform.python_version()}; 1-min load average {load:.1f} at the end")


def estimate_table(results: list[dict]) -> list[str]:
    lines = ["| example | fix | estimated | measured (± s.e.) | estimate / measured | kept | setting |",
             "|---|---|---|---|---|---|---|"]
    for r in (row for res in results for row in res["rows"]):
        measured = f"{r['measured']:.2f}x ± {100 * (r['se'] or 0):.0f}%" if r["measured"] else r["why"]
        ratio = f"{r['estimate'] / r['measured']:.2f}" if r["measured"] else "-"
        setting = ", ".join(f"{k}={v}" for k, v in (r["params"] or {}).items()) or "-"
        lines.append(f"| {r['case']} | `{r['fix']}` | {r['estimate']:.2f}x | {measured} | {ratio} | "
                     f"{'yes' if r['kept'] else 'no'} | {setting} |")
    return lines


def ladder_table(result: dict) -> list[str]:
    doc = result["ladder"]
    b = doc["baseline"]
    unit = "samples/s" if b["samples_per_s"] else "steps/s"
    key = "samples_per_s" if b["samples_per_s"] else "steps_per_s"
    lines = [f"`stepscope tune {' '.join(result['command'])}` ({doc['elapsed_s']:.0f} s; baseline drift "
             f"{100 * (b['drift'] or 0):.1f}%, noise band ±{100 * (b['noise_band'] or 0):.0f}%):", "",
             f"| rung | fix | {unit} | vs baseline | estimated | kept | why |", "|---|---|---|---|---|---|---|",
             f"| 0 | baseline | {b[key]:,.1f} | 1.00x | | | |"]
    for t in doc["trials"]:
        params = ", ".join(f"{k}={v}" for f in t["tried"] for k, v in t["params"].get(f, {}).items())
        rate = f"{t[key]:,.1f}" if t[key] else "-"
        speedup = f"{t['speedup']:.2f}x" if t["speedup"] else "-"
        est = f"~{t['estimated_speedup']:.2f}x" if t["estimated_speedup"] else "-"
        lines.append(f"| {t['rung']} | `{'+'.join(t['tried'])}`{f' ({params})' if params else ''} | {rate} | "
                     f"{speedup} | {est} | {'yes' if t['accepted'] else 'no'} | {t['reason']} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--budget", default="10m", help="per tune (10m)")
    parser.add_argument("--write", metavar="MD", help="replace the bench_tune section of this markdown file")
    parser.add_argument("--json", metavar="FILE", help="all results as JSON")
    args = parser.parse_args()
    results = [run_case(name, CASES[name], args.budget) for name in args.cases.split(",")]
    text = [f"Measured {time.strftime('%Y-%m-%d')} on {machine()}.", "", *estimate_table(results), ""]
    for result in results:
        text += [*ladder_table(result), ""]
    print("\n".join(text))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    if args.write:
        path = Path(args.write)
        doc = path.read_text()
        if START not in doc or END not in doc:
            raise SystemExit(f"{path}: no {START} ... {END} section to replace")
        head, rest = doc.split(START, 1)
        path.write_text(head + START + "\n" + "\n".join(text) + "\n" + END + rest.split(END, 1)[1])


if __name__ == "__main__":
    main()
