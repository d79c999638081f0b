"""Fix estimates against plain runs: what the diagnosis of a GPU trace promised for a fix, beside what the same
script measured plain, without the profiler, with that fix applied (tests/data/gpu_h100/estimate_pairs.json: the
published walk-through's rungs on examples/cifar_resnet.py and the pattern examples, on an H100).

    .venv/bin/python benchmarks/bench_estimates.py                       # seconds
    .venv/bin/python benchmarks/bench_estimates.py --write docs/tune.md  # replace its bench_estimates section
    .venv/bin/python benchmarks/bench_estimates.py --loaders [--rounds 3] # + the DataLoader workers' estimates
                                                                          # against plain runs on this CPU (minutes)

The estimate is the diagnosis' own (`stepscope analyze TRACE --batch-size N`); a change that is several
recommendations (pinned memory with non-blocking copies) takes the largest, as `stepscope tune` does for one
candidate; a batch grown k times is the replay at k (stepscope.replay.whatif.bigger_batch). The traces are the
rounds' recorded ones (no timing pass, no calibration): their estimates come from the timeline as recorded.
`benchmarks/bench_tune.py` gives the same table on the CPU examples, against `stepscope tune`'s measurements.
Prints; exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

from markdown_section import replace_section

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "gpu_h100"
START, END = "<!-- bench_estimates:start -->", "<!-- bench_estimates:end -->"


def plain_samples_per_s() -> dict[str, float]:
    """plain_timings.txt: name -> samples/s (each line ends in the script's own throughput)."""
    found = {}
    for line in (DATA / "plain_timings.txt").read_text().splitlines():
        if line.startswith("#") or ":" not in line:
            continue
        name, rest = line.split(":", 1)
        value = next(w for w in reversed(rest.replace(",", "").split(" samples/s")[0].split()) if w)
        found[name.strip()] = float(value)
    return found


def estimate(pair: dict) -> float | None:
    """The diagnosis' estimate for the pair's change, on the pair's trace."""
    from stepscope import analyze
    from stepscope.replay.whatif import bigger_batch
    from stepscope.trace.load import read_trace

    path = DATA / pair["trace"] / "trace.json.gz"
    if pair.get("batch_factor"):
        return bigger_batch(read_trace(path), float(pair["batch_factor"])).speedup
    report = analyze(path, batch_size=pair["batch"])
    # a fix estimated under MIN_GAIN is considered, not recommended: its estimate is still the diagnosis' own
    values = [r.estimated_speedup for r in [*report.recommendations, *report.considered]
              if r.id in pair["fixes"] and r.estimated_speedup]
    return max(values) if values else None


def rows() -> list[dict]:
    plain = plain_samples_per_s()
    out = []
    for pair in json.loads((DATA / "estimate_pairs.json").read_text())["pairs"]:
        measured = plain[pair["after"]] / plain[pair["before"]]
        est = estimate(pair)
        out.append({**pair, "estimate": est, "measured": measured,
                    "ratio": est / measured if est else None})
    return out


def table(found: list[dict]) -> list[str]:
    lines = ["| trace (H100) | change | fix | estimated | measured plain | estimate / measured |",
             "|---|---|---|---|---|---|"]
    for r in found:
        est = f"{r['estimate']:.2f}x" if r["estimate"] else "no estimate"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "-"
        lines.append(f"| {r['trace']} | `{r['change']}` | `{'+'.join(r['fixes'])}` | {est} | "
                     f"{r['measured']:.2f}x | {ratio} |")
    errors = [abs(r["ratio"] - 1) for r in found if r["ratio"]]
    lines += ["", f"{len(errors)} of {len(found)} pairs with an estimate: median |estimate / measured - 1| "
              f"{statistics.median(errors):.0%}, largest {max(errors):.0%}; within 15% in "
              f"{sum(e <= 0.15 for e in errors)}, beyond 40% in {sum(e > 0.40 for e in errors)}."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="MD", help="replace the bench_estimates section of this markdown file")
    parser.add_argument("--loaders", action="store_true",
                        help="also the DataLoader workers' estimates against plain runs here (loader_estimates.py)")
    parser.add_argument("--rounds", type=int, default=3, help="--loaders: plain rounds at 0 and N workers each")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    text = [f"Computed {time.strftime('%Y-%m-%d')} by `benchmarks/bench_estimates.py`.", "", *table(rows())]
    if args.loaders:
        from loader_estimates import loader_rows, loader_table

        text += ["", *loader_table(loader_rows(args.rounds))]
    print("\n".join(text))
    if args.write:
        replace_section(Path(args.write), START, END, text)


if __name__ == "__main__":
    main()
