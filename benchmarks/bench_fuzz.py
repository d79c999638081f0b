"""The full seeded fuzz run: 1,000+ hostile inputs through the CLI, each in a child under a 2 GiB address-space
limit, with the figures the hardening promises: how every case ended, peak memory, time per case.

    .venv/bin/python benchmarks/bench_fuzz.py [--seed 7] [--count 1000] [--against main] [--keep DIR]
    .venv/bin/python benchmarks/bench_fuzz.py --links 5      # broken links, kind by kind: silent changes

`--against REF` runs the same cases with another git ref's stepscope (a temporary worktree) as the baseline,
and prints both side by side. The cases come from tests/fuzz_inputs.py and run through tests/fuzz_runner.py
(which the suite's fast subset, tests/test_fuzz.py, uses too). Exit code 1 when a case of this checkout broke
a promise (exit other than 0 or 2, a traceback, a signal, a peak over the bound, over 1 MiB on the terminal).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fuzz_runner import MEMORY_LIMIT, PEAK_RSS_BOUND_MB, STDOUT_BOUND, TIME_LIMIT_S  # noqa: E402


def run(src: Path, seed: int, count: int, keep: Path | None) -> tuple[list[dict], float]:
    command = [sys.executable, str(ROOT / "tests" / "fuzz_runner.py"), "--seed", str(seed), "--count", str(count)]
    if keep is not None:
        command += ["--keep", str(keep)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(src)})
    if done.returncode != 0:
        sys.exit(f"the fuzz runner failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines()], time.perf_counter() - started


def broken(r: dict) -> list[str]:
    why = []
    gate = r["argv"][:1] == ["diff"] and r["exit_code"] == 1
    if r["signal"] is not None:
        why.append(f"signal {r['signal']}")
    if r["traceback"]:
        why.append("traceback")
    if r["exit_code"] not in (0, 2, None) and not gate:
        why.append(f"exit {r['exit_code']}")
    if r["peak_rss_mb"] > PEAK_RSS_BOUND_MB:
        why.append(f"peak {r['peak_rss_mb']:.0f} MB")
    if r["stdout_bytes"] > STDOUT_BOUND:
        why.append(f"terminal {r['stdout_bytes'] / 2**20:.1f} MiB")
    return why


def summary(name: str, results: list[dict], wall: float) -> list[tuple[str, str]]:
    rss = sorted(r["peak_rss_mb"] for r in results)
    secs = sorted(r["seconds"] for r in results)
    bad = [r for r in results if broken(r)]
    kinds = Counter(w.split()[0] for r in bad for w in broken(r))  # signal, traceback, exit, peak, terminal
    outcomes = Counter("error (2)" if r["exit_code"] == 2 else "analysed (0)" if r["exit_code"] == 0
                       else f"exit {r['exit_code']}" if r["exit_code"] is not None else "killed" for r in results)
    families = Counter(r["family"] for r in results)
    return [
        ("stepscope", name),
        ("cases", f"{len(results)} ({', '.join(f'{k} {v}' for k, v in sorted(families.items()))})"),
        ("outcomes", ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))),
        ("broke a promise", f"{len(bad)}" + (f" ({', '.join(f'{k} {v}' for k, v in kinds.items())})" if bad else "")),
        ("peak RSS per case", f"median {statistics.median(rss):.0f} MB, p99 {rss[int(0.99 * (len(rss) - 1))]:.0f} MB, "
                              f"max {rss[-1]:.0f} MB (bound {PEAK_RSS_BOUND_MB} MB)"),
        ("time per case", f"median {statistics.median(secs):.2f} s, p99 {secs[int(0.99 * (len(secs) - 1))]:.2f} s, "
                          f"max {secs[-1]:.2f} s (limit {TIME_LIMIT_S} s)"),
        ("wall time", f"{wall:.0f} s, {len(results) / wall:.1f} cases/s (generation included)"),
    ]


def links(seeds: int) -> int:
    """Every kind of broken link (tests/fuzz_links.py) on every scenario, `seeds` seeds each, in this process: how
    each case ended against its unmangled original. Exit 1 on a silent change or a crash."""
    import traceback

    import fuzz_links as fl
    from stepscope.errors import StepscopeError
    from stepscope.pipeline import analyze

    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        originals = {s: fl.outcome(analyze(fl.write_original(s, folder)))
                     for s in (*fl.KINETO_SCENARIOS, *fl.NSYS_SCENARIOS)}
        print(f"{'kind':34} {'cases':>5} {'same':>5} {'noted':>5} {'refused':>7} {'silent':>6} {'crashed':>7}")
        for kind in fl.KINDS:
            tally = Counter()
            for scenario in fl.SCENARIOS_OF[kind]:
                for seed in range(seeds):
                    path = fl.write_mangled(kind, scenario, seed, folder)
                    try:
                        mangled = fl.outcome(analyze(path))
                    except StepscopeError:
                        tally["refused"] += 1
                        continue
                    except Exception:  # a crash is what this looks for: print it and go on
                        tally["crashed"] += 1
                        print(f"  {kind} {scenario} seed {seed}:\n{traceback.format_exc()}")
                        continue
                    original = originals[scenario]
                    if fl.silent_change(original, mangled, fl.NOTE_WORDS[kind]):
                        tally["silent"] += 1
                    elif (mangled.primary, mangled.step_time_us, mangled.steps) != (
                            original.primary, original.step_time_us, original.steps):
                        tally["noted"] += 1
                    else:
                        tally["same"] += 1
            bad += tally["silent"] + tally["crashed"]
            print(f"{kind:34} {sum(tally.values()):>5} {tally['same']:>5} {tally['noted']:>5} {tally['refused']:>7} "
                  f"{tally['silent']:>6} {tally['crashed']:>7}")
    return 1 if bad else 0


def worktree(ref: str, into: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(into), ref], check=True,
                   capture_output=True)
    return into / "src"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--against", metavar="REF", help="also run the cases with this git ref's stepscope")
    p.add_argument("--keep", type=Path, help="copy the folders of this checkout's failing cases here")
    p.add_argument("--links", type=int, metavar="SEEDS",
                   help="instead: every kind of broken link on every scenario, SEEDS seeds each (silent changes)")
    args = p.parse_args()
    if args.links:
        sys.path.insert(0, str(ROOT / "src"))
        return links(args.links)
    print(f"{args.count} cases, seed {args.seed}, each child under RLIMIT_AS {MEMORY_LIMIT >> 30} GiB; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}", flush=True)
    results, wall = run(ROOT / "src", args.seed, args.count, args.keep)
    columns = [summary("this checkout", results, wall)]
    if args.against:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                base, base_wall = run(worktree(args.against, Path(tmp) / "ref"), args.seed, args.count, None)
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(tmp) / "ref")],
                               check=False, capture_output=True)
        columns.append(summary(args.against, base, base_wall))
    for i, (label, _) in enumerate(columns[0]):
        print(f"{label:>18}  " + "  |  ".join(c[i][1] for c in columns))
    for r in [r for r in results if broken(r)][:20]:
        print(f"  case {r['index']} ({r['family']}: {', '.join(r['damage'])}): {', '.join(broken(r))}: "
              f"{r['first_error_line'][:160]}")
    return 1 if any(broken(r) for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
