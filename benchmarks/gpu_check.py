"""The GPU check for a short device loan: the step meter, the verdict and tune against plain runs, in one call.

    bash benchmarks/gpu_check.sh          # on the device machine (it sets up the path and calls this)

Within --budget seconds (default 540, so one 600 s call leaves time to copy the results back), in this order, each
part skipped when the budget left cannot hold it:
 1. the walk-through's ResNet-18 (examples/cifar_resnet.py, 224 px) as it is (workers 0): plain, perturbed (4
    workers) and under `stepscope run`: the meter's headline against the plain step, the verdict against what the
    perturbation answers;
 2. GPT-2-shaped training (examples/gpt2_train.py): plain, perturbed (2x the batch) and under `stepscope run`;
 3. `stepscope tune` on the walk-through's loop, against the seven steps by hand (every flag of cifar_resnet.py);
and keeps the run folders' meter.json, report.json and timing trace (gzipped) as fixtures under
tests/data/gpu_<gpu>_meter/ inside one tar.gz in $OUT, for the CPU tests and for predict from one GPU to the other
once both an H100 and an H200 have run it. Prints one table; exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RATE = re.compile(r"([\d.]+) samples/s")
HAND_LADDER = ["--workers", "4", "--pin-memory", "--uint8", "--set-to-none", "--amp", "--compile",
               "--batch-size", "128"]


class Budget:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def plain_rate(script: str, args: list[str]) -> float | None:
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, cwd=ROOT, timeout=300)
    found = RATE.findall(done.stdout)
    return float(found[-1]) if found else None


def stepscope_run(name: str, script: str, args: list[str], folder: Path) -> dict | None:
    out = folder / name
    subprocess.run([sys.executable, "-m", "stepscope", "run", "-o", str(out), "-f", script, *args],
                   capture_output=True, text=True, cwd=ROOT, timeout=300)
    path = out / "report.json"
    return json.loads(path.read_text()) if path.is_file() else None


def check_job(name: str, script: str, args: list[str], perturbed: list[str], how: str, folder: Path) -> list[str]:
    base = plain_rate(script, args)
    pert = plain_rate(script, args + perturbed)
    report = stepscope_run(name, script, args, folder)
    if report is None or base is None:
        return [name, "-", "-", how, "-", "stepscope run wrote no report" if report is None else "no plain rate"]
    meter = report.get("meter") or {}
    batch = report["run"]["batch_size"] if report.get("run") else None
    plain_step_us = batch / base * 1e6 if batch else None
    headline = report["summary"]["step_time_us"]
    error = f"{headline / plain_step_us - 1:+.1%}" if plain_step_us else "-"
    phases = " ".join(f"{p['name']} {p['share']:.0%}" for p in meter.get("phases", []) if p["share"] >= 0.01)
    device = meter.get("device_phases") or []  # the device's split (CUDA events at the phases' entries)
    if device:
        phases += "; on the device " + " ".join(f"{p['name']} {p['share']:.0%}" for p in device)
    if meter.get("device_busy") is not None:
        phases += f"; NVML busy {meter['device_busy']:.0%}"
    verdict = report["patterns"][0]["id"] if report["patterns"] else "-"
    answer = f"{how}: {pert / base:.2f}x samples/s" if pert else f"{how}: -"
    return [name, f"{plain_step_us / 1e3:.2f} ms" if plain_step_us else "-", f"{headline / 1e3:.2f} ms ({error})",
            answer, verdict, phases]


def tune_against_hand(folder: Path, budget_s: float) -> list[str]:
    base = plain_rate("examples/cifar_resnet.py", ["--steps", "40"])
    hand = plain_rate("examples/cifar_resnet.py", ["--steps", "40", *HAND_LADDER])
    out = folder / "tune"
    subprocess.run([sys.executable, "-m", "stepscope", "tune", "--budget", f"{int(budget_s)}s", "--out", str(out),
                    "--allow-batch-change", "--no-final-diagnosis", "examples/cifar_resnet.py", "--steps", "400"],
                   capture_output=True, text=True, cwd=ROOT, timeout=budget_s + 120)
    result = out / "tune.json"
    tuned = json.loads(result.read_text()) if result.is_file() else {}
    kept = tuned.get("applied", [])
    final = tuned.get("speedup")
    by_hand = f"{hand / base:.2f}x" if base and hand else "-"
    return ["tune (walk-through)", f"{base:.0f} samples/s" if base else "-", f"tuned {final}x, kept {kept}",
            f"seven steps by hand: {by_hand}", "-", "-"]


def keep_fixtures(folder: Path, gpu: str, dest: Path) -> Path:
    archive = dest / f"gpu_{gpu}_meter.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for run in sorted(p for p in folder.iterdir() if p.is_dir()):
            for name in ("meter.json", "report.json", "timing.json.gz", "calibration.json"):
                path = run / name
                if path.is_file() and path.stat().st_size < 4 * 2**20:
                    tar.add(path, arcname=f"tests/data/gpu_{gpu}_meter/{run.name}/{name}")
    return archive


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--budget", type=float, default=540)
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu_check"))
    args = p.parse_args()
    budget = Budget(args.budget)
    import torch

    gpu = torch.cuda.get_device_name(0).lower().split()[-1] if torch.cuda.is_available() else "none"
    folder = Path("/tmp/gpu_check_runs")
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    jobs = [("resnet18_rung0", "examples/cifar_resnet.py", ["--steps", "60"], ["--workers", "4"], "4 workers"),
            ("gpt2", "examples/gpt2_train.py", ["--steps", "60"], ["--batch-size", "24"], "2x the batch")]
    for name, script, job_args, perturbed, how in jobs:
        if budget.left() < 120:
            rows.append([name, "skipped: budget", "", "", "", ""])
            continue
        rows.append(check_job(name, script, job_args, perturbed, how, folder))
        print(" | ".join(rows[-1]), flush=True)
    if budget.left() > 200:
        rows.append(tune_against_hand(folder, budget.left() - 90))
    dest = Path(args.out)
    dest.mkdir(parents=True, exist_ok=True)
    archive = keep_fixtures(folder, gpu, dest)
    print(f"\nGPU: {gpu}; fixtures: {archive}")
    print("| job | plain step | stepscope headline (vs plain) | perturbation | verdict | meter phases |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
