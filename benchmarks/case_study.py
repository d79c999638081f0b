"""The published ResNet-18 walk-through, rung by rung, from the traces and plain timings recorded on a real GPU.

    .venv/bin/python benchmarks/case_study.py [tests/data/gpu_h100]

For each rung of examples/cifar_resnet.py (one more of the walk-through's fixes each), it prints the measured
samples/s of the plain run, stepscope's verdict on the profiled run, and the gain stepscope estimated for
the fix the next rung applies beside the gain that rung measured. The output is the table in
docs/case-study.md; it reads only files recorded on the GPU (see the folder's MANIFEST.md).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from stepscope import analyze

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["(baseline)", "--workers 8", "--pin-memory", "--batch-size 128", "--uint8", "--set-to-none", "--amp",
         "--compile"]
# The fix id stepscope would name for the step that the next rung takes (first found wins).
NEXT_FIX = [("dataloader_workers",), ("non_blocking_copy", "pin_memory"), ("larger_batch",), ("uint8_transfer",),
            ("set_to_none",), ("amp",), ("torch_compile",)]
PLAIN = re.compile(r"^rung(\d+): .*?([\d.]+) samples/s")


def plain_rates(folder: Path) -> dict[int, float]:
    rates = {}
    for line in (folder / "plain_timings.txt").read_text().splitlines():
        if m := PLAIN.match(line):
            rates[int(m.group(1))] = float(m.group(2))
    return rates


def main(folder: Path) -> None:
    rates = plain_rates(folder)
    print("| rung | adds | samples/s | vs previous | vs baseline | verdict (share) | next fix: estimated | measured |")
    print("|---|---|---|---|---|---|---|---|")
    for rung in sorted(rates):
        trace = folder / f"cifar_rung{rung}" / "trace.json.gz"
        verdict, estimate = "(not profiled)", ""
        if trace.exists():
            report = analyze(trace)
            if report.patterns:
                verdict = f"{report.patterns[0].id} ({report.patterns[0].share:.0%})"
            if rung - 1 < len(NEXT_FIX):
                ids = NEXT_FIX[rung - 1]
                rec = next((r for i in ids for r in report.recommendations if r.id == i), None)
                estimate = (f"{rec.id} {rec.estimated_speedup:.2f}x" if rec and rec.estimated_speedup
                            else f"{ids[0]}: not recommended")
        measured = f"{rates[rung + 1] / rates[rung]:.2f}x" if rung + 1 in rates else ""
        previous = f"{rates[rung] / rates[rung - 1]:.2f}x" if rung - 1 in rates else ""
        print(f"| {rung} | {FLAGS[rung - 1]} | {rates[rung]:,.0f} | {previous} | {rates[rung] / rates[1]:.2f}x | "
              f"{verdict} | {estimate} | {measured} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "data" / "gpu_h100")
