"""The job as it runs: the replayed timeline against the job run plain, and the verdict against the perturbation.

    .venv/bin/python benchmarks/bench_replay.py            # the GPU fixtures (seconds)
    .venv/bin/python benchmarks/bench_replay.py --cpu      # also live CPU captures of the examples (minutes)
    .venv/bin/python benchmarks/bench_replay.py --fitted   # the GPU fixtures without their calibration

1. As recorded: the replay that changes nothing gives every real trace's steps back, to the ns (count).
2. GPU live captures (tests/data/gpu_h100_live: `stepscope run` with the timing pass and the calibration, and the
   same job run plain in the same lease): the step as recorded, replayed, the run's unprofiled reference and the
   plain step; the replay's error against both; the verdict of the replayed timeline beside the perturbation's
   answer (tests/data/gpu_h100_r5/MANIFEST.md: a doubled batch, CUDA graphs, more workers, pinned memory, run plain).
   With --fitted, each without its calibration: the default cost per event sized to the gap (replay/deperturb.py).
3. With --cpu: the CPU examples captured live here and run plain here (tests/gpu/faithful_driver.py, no profiler).
Prints; exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
LIVE = ROOT / "tests" / "data" / "gpu_h100_live"
# What perturbing each job plain showed (tests/data/gpu_h100_r5/MANIFEST.md).
TRUTH = {
    "gpt2_b12": ("gpu_compute_bound", "batch x2: step 1.82x; CUDA graph 1.01x"),
    "nano_b64": ("launch_bound", "batch x2: step 1.14x; CUDA graph 2.12x faster"),
    "walk_w0": ("input_bound", "8 workers 2.74x faster"),
    "cifar_r1": ("input_bound", "8 workers 1.5x faster"),
    "copy_bound": ("copy_bound", "pinned memory 2.5x faster"),
    "input_bound": ("input_bound", "8 workers 6x faster"),
    "launch_bound": ("launch_bound", "batch x2: step 1.03x"),
    "sync_bound": ("sync_bound", "no syncs 1.6-1.9x faster"),
    "gpu_compute": ("gpu_compute_bound", "batch x2: step 1.93x"),
}
CPU_EXAMPLES = {
    "launch_bound": ["examples/pattern_launch_bound.py", "--depth", "50"],
    "input_bound": ["examples/pattern_input_bound.py", "--work", "4"],
    "gpt2_small": ["examples/gpt2_train.py"],
}


def as_recorded() -> None:
    import numpy as np

    from stepscope.analysis.steps import find_steps
    from stepscope.replay import replay
    from stepscope.trace.load import read_trace

    shared = ROOT.parent / "shared" / "traces"
    paths = sorted([*shared.glob("kineto/**/*.json.gz"), *shared.glob("nsys/*.sqlite"),
                    *(ROOT / "tests" / "data").glob("**/*.json.gz")])
    same = 0
    for path in paths:
        trace = read_trace(path)
        a, b = find_steps(trace), find_steps(replay(trace))
        same += int(a.ids == b.ids and np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end))
    print(f"1. as recorded: {same} of {len(paths)} real traces give their steps back to the ns")


def one(timing: Path, reference: dict, calibration: dict | None) -> tuple[object, object]:
    from stepscope.capture.calibrate import ProfilerCost
    from stepscope.model.report import Reference
    from stepscope.pipeline import analyze

    ref = Reference(method=reference["method"], step_us=reference["step_us"], values_us=reference["values_us"],
                    steps=reference["steps"], noise=reference["noise"])
    cost = msgspec.convert(calibration, ProfilerCost) if calibration else None
    report = analyze(timing, reference=ref, calibration=cost)
    return report, report.replay


def row(name: str, plain_ms: float, report: object, truth: str | None, why: str) -> tuple[float | None, bool]:
    r = report.replay  # type: ignore[attr-defined]
    primary = report.patterns[0].id if report.patterns else "-"  # type: ignore[attr-defined]
    replayed = r.replayed_step_us / 1e3 if r.replayed_step_us else None
    err_plain = replayed / plain_ms - 1 if replayed else None
    ok = truth is None or primary == truth
    print(f"   {name:20s} {r.recorded_step_us / 1e3:8.2f} {replayed or float('nan'):8.2f} "
          f"{r.unprofiled_step_us / 1e3:8.2f} {plain_ms:8.2f} {r.error if r.error is not None else float('nan'):+7.1%} "
          f"{err_plain if err_plain is not None else float('nan'):+7.1%}  {primary:18s} "
          f"{(truth or '-') + ('' if ok else ' (differs)'):28s} {why}")
    return err_plain, ok


HEADER = (f"   {'job':20s} {'recorded':>8s} {'replayed':>8s} {'unprof.':>8s} {'plain':>8s} {'vs ref':>7s} "
          f"{'vs plain':>7s}  {'verdict (replayed)':18s} {'perturbation says':28s}")


def gpu_fixtures(fitted: bool = False) -> None:
    how = "the cost fitted to the gap, no calibration" if fitted else "calibrated"
    print(f"2. GPU live captures (H100; ms per step; medians; errors of the replayed step; {how})")
    print(HEADER)
    errors, agree, n = [], 0, 0
    for folder in sorted(p for p in LIVE.iterdir() if p.is_dir()):
        run = json.loads((folder / "run.json").read_text())["run"]
        plain = statistics.median(json.loads((folder / "plain.json").read_text())["plain_ms"])
        calibration = json.loads((folder / "calibration.json").read_text())
        job = folder.name.split("_", 1)[1].removesuffix("_again").removesuffix("_noshapes")
        truth, why = TRUTH.get(job, (None, ""))
        report, _ = one(folder / "timing.json.gz", run["reference"], None if fitted else calibration)
        err, ok = row(folder.name, plain, report, truth, why)
        if err is not None:
            errors.append(abs(err))
        agree += int(ok)
        n += 1
    if errors:
        print(f"   replay vs plain: median |error| {statistics.median(errors):.1%}, within 5% in "
              f"{sum(e <= 0.05 for e in errors)} of {len(errors)}; the verdict agrees with the perturbation in "
              f"{agree} of {n}")


def cpu_live() -> None:
    print("3. CPU live captures here (stepscope run) against the same example run plain here (no profiler)")
    print(HEADER)
    for name, command in CPU_EXAMPLES.items():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            subprocess.run([sys.executable, "-m", "stepscope", "run", "--out", str(out), *command, "--steps", "40"],
                           cwd=ROOT, capture_output=True, timeout=900)
            subprocess.run([sys.executable, "tests/gpu/faithful_driver.py", "--out", str(Path(tmp) / "plain"),
                            "--optsets", "none", "--windows", "3", "--plain", "10", "--", *command, "--steps", "200"],
                           cwd=ROOT, capture_output=True, timeout=900)
            plain = statistics.median(json.loads((Path(tmp) / "plain" / "plain.json").read_text())["plain_ms"])
            report = json.loads((out / "report.json").read_text())
            calibration = json.loads((out / "calibration.json").read_text())
            rep, _ = one(out / "timing.json.gz", report["run"]["reference"], calibration)
            row(name, plain, rep, None, "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu", action="store_true", help="also capture the CPU examples live (minutes)")
    p.add_argument("--fitted", action="store_true", help="replay the GPU fixtures without their calibration")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    as_recorded()
    gpu_fixtures(args.fitted)
    if args.cpu:
        cpu_live()


if __name__ == "__main__":
    main()
