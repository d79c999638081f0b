"""The cross-GPU prediction checked on our own measured pairs: every workload in tests/data/gpu_h100 and
tests/data/gpu_h200 recorded on both GPUs is predicted from each side and compared with the other side's own
trace. Prints the table for docs/predict.md and, with --write, updates src/stepscope/predict/data/validation.json
(the model's measured error, from which every prediction's interval is drawn).

    PYTHONPATH=src python benchmarks/predict_validation.py [--write]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
OUT = ROOT / "src" / "stepscope" / "predict" / "data" / "validation.json"
GPUS = ("gpu_h100", "gpu_h200")


def workloads() -> list[str]:
    names = [{p.name for p in (DATA / g).iterdir() if (p / "trace.json.gz").is_file()} for g in GPUS]
    return sorted(names[0] & names[1])


def run() -> dict:
    from stepscope.hardware import load_table
    from stepscope.predict.validation import compare, summary
    from stepscope.trace.kineto import read_kineto

    table = load_table(use_user_file=False)
    results = []
    for name in workloads():
        traces = [read_kineto(DATA / g / name / "trace.json.gz") for g in GPUS]
        results.append(compare(name, traces[0], traces[1], table))
        results.append(compare(name, traces[1], traces[0], table))
    return {"schema": "stepscope.predict.validation/1",
            "how": "benchmarks/predict_validation.py over tests/data/gpu_h100 and tests/data/gpu_h200 "
                   "(same commands, same software; MANIFEST.md in each)",
            "summary": summary(results), "pairs": [r.to_dict() for r in results]}


def markdown(doc: dict) -> str:
    lines = ["| workload | origin -> target | origin bottleneck | measured | predicted | error | host speed | "
             "predicted, host matched | error | GPU time measured | predicted | error | predicted bottleneck "
             "(measured) |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["pairs"]:
        lines.append(
            f"| {r['workload']} | {r['origin']} -> {r['target']} | {r['origin_bottleneck']} | "
            f"{r['measured_us'] / 1000:.2f} ms | {r['predicted_us'] / 1000:.2f} ms | {r['error']:+.1%} | "
            f"{r['host_speed']:.2f} | {r['host_matched_us'] / 1000:.2f} ms | {r['host_matched_error']:+.1%} | "
            f"{r['gpu_measured_us'] / 1000:.2f} ms | {r['gpu_predicted_us'] / 1000:.2f} ms | {r['gpu_error']:+.1%} | "
            f"{r['predicted_bottleneck']} ({r['measured_bottleneck']}) |")
    s = doc["summary"]
    lines.append("")
    lines.append(f"Mean |error| over {s['pairs']} predictions: step time {s['step_error_mean']:.1%} (host as "
                 f"measured), {s['host_matched_error_mean']:.1%} (host speed matched); "
                 f"GPU time {s['gpu_time_error_mean']:.1%} "
                 f"(largest {s['gpu_time_error_max']:.1%}). Input-bound cases: largest |error| "
                 f"{s['input_bound_error_max']:.1%} ({s['input_bound_host_matched_error_max']:.1%} host matched). "
                 f"Predicted bottleneck = measured one in {s['bottleneck_agreement']:.0%} of the predictions.")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"update {OUT.relative_to(ROOT)}")
    args = parser.parse_args()
    doc = run()
    print(markdown(doc))
    if args.write:
        OUT.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
