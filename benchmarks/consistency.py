"""The consistency check on every example and pattern workload (issue 40 item 5): each through `stepscope run`,
then its run folder through `analyze --json`, a job of two rank folders (the run and a second run of it), `diff`,
watch's view and terminal, and the LSP's hints and lens (tests/consistency_checks.py); `tune` on one workload, its
tune.json against its terminal view; and on the demo (examples/cifar_resnet.py as scripts/demo runs it, fewer
steps) the line that calls the optimizer step within the meter's optimizer phase, the lines within the step.

    .venv/bin/python benchmarks/consistency.py                 # every workload and tune: ~10-15 min on 2 cores
    .venv/bin/python benchmarks/consistency.py --only demo     # one workload by name
    .venv/bin/python benchmarks/consistency.py --no-tune --json consistency.json

It prints each workload's figures checked and every figure found with two values; the exit code is 1 when any
was found (or a run failed), 0 when every figure had one value."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from rich.console import Console  # noqa: E402

import consistency_checks as c  # noqa: E402
from stepscope.model.report import from_json  # noqa: E402
from stepscope.model.tune import Tune, tune_from_json  # noqa: E402
from stepscope.report.tune import TuneTerminalRenderer  # noqa: E402

EX = ROOT / "examples"
SHORT = ("--skip", "5", "--warmup", "1", "--steps", "3")  # a short window, as watch's
# name -> (script, the program's arguments): small CPU settings, every workload a few seconds of steps.
WORKLOADS = {
    "demo": (EX / "cifar_resnet.py", ("--device", "cpu", "--image-size", "32", "--batch-size", "16", "--steps", "24",
                                      "--num-images", "512")),
    "cifar_small": (EX / "cifar_resnet.py", ("--image-size", "16", "--batch-size", "8", "--num-images", "256",
                                             "--steps", "24")),
    "copy_bound": (EX / "pattern_copy_bound.py", ("--image-size", "32", "--batch-size", "16", "--steps", "24")),
    "cpu_compute_bound": (EX / "pattern_cpu_compute_bound.py", ("--steps", "24")),
    "gpu_compute_bound": (EX / "pattern_gpu_compute_bound.py", ("--width", "256", "--batch-size", "128",
                                                                "--steps", "24")),
    "input_bound": (EX / "pattern_input_bound.py", ("--work", "2", "--image-size", "32", "--steps", "24")),
    "launch_bound": (EX / "pattern_launch_bound.py", ("--depth", "100", "--steps", "24")),
    "sync_bound": (EX / "pattern_sync_bound.py", ("--width", "64", "--depth", "4", "--steps", "30")),
}
TUNE_WORKLOAD = "input_bound"


def run(script: Path, args: tuple[str, ...], out: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "stepscope", "run", "-o", str(out), "-f", *SHORT, str(script),
                           *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"stepscope run {script.name} failed: {done.stderr[-1500:]}")


def check_workload(name: str, work: Path) -> dict:
    script, args = WORKLOADS[name]
    folder, second = work / name / "run", work / name / "run-2"
    started = time.monotonic()
    run(script, args, folder)
    ledger = c.check_run_folder(folder, work / name / "scratch", bases=(ROOT,), script=script, ranks=True)
    # A job of two real rank folders (a second run of the program): its main rank's figures are its own folder's.
    run(script, args, second)
    job = c.analyze_json([folder, second], work / name / "job2.json")
    chosen = [d.path for d in (job.cross_rank.diagnoses if job.cross_rank else []) if d.role != "median"]
    main = Path(chosen[0]).parent if chosen else folder
    alone = c.analyze_json([main], work / name / "main-alone.json")
    c.reports_agree(ledger, alone, job, "analyze RUN RUN_2 (the job's main rank) against that rank's folder alone")
    report = from_json((folder / "report.json").read_bytes())
    fits = c.optimizer_line_fits(report)
    return {"workload": name, "seconds": round(time.monotonic() - started, 1), "checked": ledger.checked,
            "kinds": sorted(ledger.kinds), "problems": ledger.problems, "optimizer_line": fits}


def check_tune(work: Path) -> dict:
    """`stepscope tune` on one workload: each figure of tune.json as its terminal view shows it."""
    script, args = WORKLOADS[TUNE_WORKLOAD]
    # Steps enough for the baseline's and each trial's windows however fast the machine: a tune stops it early.
    args = tuple("4000" if i and args[i - 1] == "--steps" else a for i, a in enumerate(args))
    out = work / "tune"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "stepscope", "tune", "--out", str(out), "--budget", "6m",
                           "--max-trials", "3", "--trial-steps", "12", "--windows", "2", str(script), *args],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0 or not (out / "tune.json").is_file():
        return {"workload": "tune", "checked": 0, "problems": [f"tune failed: {done.stderr[-1500:]}"]}
    tune = tune_from_json((out / "tune.json").read_bytes())
    ledger = c.Ledger()
    console = Console(file=io.StringIO(), width=220, record=True, color_system=None)
    console.print(TuneTerminalRenderer().render(tune))
    text = console.export_text()
    tune_figures(ledger, tune, " ".join(text.replace("│", " ").split()))
    return {"workload": "tune", "checked": ledger.checked, "kinds": sorted(ledger.kinds),
            "problems": ledger.problems}


def tune_figures(ledger: c.Ledger, tune: Tune, flat: str) -> None:
    if tune.speedup is not None and tune.applied:
        m = re.search(r"tuned: ([\d.]+x)", flat)
        ledger.shown("tune speedup", "tune terminal", m.group(1) if m else None, tune.speedup)
    elif tune.status == "finished":  # nothing kept: said in words, not as a figure
        ledger.same("tune kept nothing", "tune terminal", "tuned: no fix was faster beyond the noise" in flat, True)
    for t in tune.trials:
        if t.speedup is None:
            continue
        label = "+".join(t.tried) or "+".join(t.fixes)
        # The ladder's row: "<rung> + <first fix> ...", up to the next row.
        m = re.search(rf"(?<![\w.=]){t.rung} \+ {re.escape(t.tried[0] if t.tried else label)}", flat)
        if m is None:
            ledger.problems.append(f"trial {t.rung} ({label}): not found in the tune terminal's ladder")
            continue
        after = re.search(rf"(?<![\w.=]){t.rung + 1} \+ ", flat[m.end():])
        shown = re.findall(r"~?[\d.]+x", flat[m.start():m.end() + (after.start() if after else 400)])
        values = [float(x.strip("~x")) for x in shown]
        ledger.same(f"fix {label} measured", "tune terminal ladder", any(abs(v - t.speedup) <= 0.005 for v in values),
                    True)
    # What tune measured as no gain is not recommended again by its final diagnosis (issue 40: tune dropped
    # channels_last and torch_compile, then recommended them).
    dropped = {f for t in tune.trials if not t.accepted and t.status == "measured" for f in t.tried}
    for r in tune.final_recommendations:
        ledger.same(f"fix {r.id} final recommendation", "tune.json", r.id in dropped and r.id not in tune.applied,
                    False)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", choices=sorted(WORKLOADS), help="these workloads only")
    p.add_argument("--no-tune", dest="tune", action="store_false")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--keep", metavar="DIR", help="write the run folders here (default: a temporary folder)")
    args = p.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        for name in args.only or WORKLOADS:
            try:
                results.append(check_workload(name, work))
            except (RuntimeError, AssertionError, subprocess.TimeoutExpired) as exc:
                results.append({"workload": name, "checked": 0, "problems": [f"failed: {exc}"[:2000]]})
            r = results[-1]
            print(f"{name:20s} {r['checked']:5d} figures checked, {len(r['problems'])} with two values"
                  + (f", optimizer line: {r['optimizer_line'] or 'fits'}" if "optimizer_line" in r else ""),
                  flush=True)
            for problem in r["problems"]:
                print(f"    {problem}")
        if args.tune and not args.only:
            results.append(check_tune(work))
            r = results[-1]
            print(f"{'tune':20s} {r['checked']:5d} figures checked, {len(r['problems'])} with two values")
            for problem in r["problems"]:
                print(f"    {problem}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    bad = sum(len(r["problems"]) + len(r.get("optimizer_line") or []) for r in results)
    print(f"{sum(r['checked'] for r in results)} figures checked, {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
