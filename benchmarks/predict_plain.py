"""predict against the step the user sees: each H100 capture predicted on an H200 and compared with the same job
run plain on an H200 (tests/data/gpu_h200_plain, no profiler) — never profiled against profiled.

    .venv/bin/python benchmarks/predict_plain.py

Two kinds of origin: the live captures (tests/data/gpu_h100_live: the timing trace replayed without the
profiler's calibrated cost, i.e. what `stepscope run --predict h200` predicts from) and the round-5 traces as
recorded (tests/data/gpu_h100_r5, the minimal option set where there is one: what `analyze --predict` does with a
trace that has no calibration). The host is taken as measured on the origin (the two machines' hosts are not the
same: the calibration loops of these rounds differ, so their host speeds are not compared here). Prints the table
for docs/predict.md.
"""

from __future__ import annotations

import json
import statistics
import warnings
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"


def h200_plain(job: str) -> float | None:
    path = DATA / "gpu_h200_plain" / job / "plain.json"
    return statistics.median(json.loads(path.read_text())["plain_ms"]) if path.is_file() else None


def predicted_ms(report: object) -> tuple[float | None, tuple[float, float] | None, str | None]:
    prediction = report.prediction  # type: ignore[attr-defined]
    if prediction is None:
        return None, None, None
    target = next((t for t in prediction.targets if t.gpu.startswith("h200")), None)
    if target is None:
        return None, None, None
    return target.step_time_us / 1e3, (target.low_us / 1e3, target.high_us / 1e3), target.bottleneck


def origins() -> list[tuple[str, str, Path, dict]]:
    """(name, kind, trace, analyze options) per origin."""
    from stepscope.capture.calibrate import ProfilerCost
    from stepscope.model.report import Reference

    found = []
    for folder in sorted(p for p in (DATA / "gpu_h100_live").iterdir() if p.is_dir()):
        run = json.loads((folder / "run.json").read_text())["run"]
        ref = run["reference"]
        options = {"reference": Reference(method=ref["method"], step_us=ref["step_us"], values_us=ref["values_us"],
                                          steps=ref["steps"], noise=ref["noise"]),
                   "calibration": msgspec.convert(json.loads((folder / "calibration.json").read_text()),
                                                                ProfilerCost)}
        found.append((folder.name, "live, replayed", folder / "timing.json.gz", options))
    for folder in sorted(p for p in (DATA / "gpu_h100_r5").iterdir() if p.is_dir()):
        trace = folder / "trace_minimal.json.gz"
        trace = trace if trace.is_file() else folder / "trace_default.json.gz"
        found.append((f"r5_{folder.name}", "as recorded", trace, {}))
    return found


def main() -> None:
    from stepscope.pipeline import analyze
    from stepscope.predict import PredictRequest

    warnings.simplefilter("ignore")
    print(f"{'origin (H100)':22s} {'kind':15s} {'H100 step':>9s} {'H200 pred.':>10s} {'interval':>15s} "
          f"{'H200 plain':>10s} {'error':>7s} {'in':>3s}  bottleneck")
    errors, covered = {"live, replayed": [], "as recorded": []}, {"live, replayed": 0, "as recorded": 0}
    for name, kind, trace, options in origins():
        job = name.split("_", 1)[1].removesuffix("_again").removesuffix("_noshapes")
        plain = h200_plain(job)
        if plain is None:
            continue
        report = analyze(trace, predict=PredictRequest(gpus=("h200",)), **options)
        step, interval, bottleneck = predicted_ms(report)
        if step is None:
            print(f"{name:22s} {kind:15s} no prediction")
            continue
        origin_ms = report.summary.step_time_us / 1e3
        error = step / plain - 1
        inside = interval is not None and interval[0] <= plain <= interval[1]
        errors[kind].append(abs(error))
        covered[kind] += int(inside)
        span = f"{interval[0]:.1f}-{interval[1]:.1f}" if interval else "-"
        print(f"{name:22s} {kind:15s} {origin_ms:9.2f} {step:10.2f} {span:>15s} {plain:10.2f} {error:+7.1%} "
              f"{'yes' if inside else 'no':>3s}  {bottleneck}")
    for kind, values in errors.items():
        if values:
            print(f"{kind}: mean |error| {statistics.mean(values):.1%}, median {statistics.median(values):.1%}, "
                  f"largest {max(values):.1%}; the interval covers the plain step in {covered[kind]} of {len(values)}")


if __name__ == "__main__":
    main()
