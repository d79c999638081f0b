"""The step meter against the job run plain, on CPU workloads of each shape (benchmarks/meter_workloads.py).

    .venv/bin/python benchmarks/bench_meter.py                 # every workload, 3 rounds (~10 min on 2 cores)
    .venv/bin/python benchmarks/bench_meter.py --only storage --rounds 5
    .venv/bin/python benchmarks/bench_meter.py --examples         # the examples/ scripts instead (CPU sizes)
    .venv/bin/python benchmarks/bench_meter.py --in-process --rounds 16   # the meter's cost per step, in process
    .venv/bin/python benchmarks/bench_meter.py --in-process --only tiny --rounds 16   # the same, tiny-op loop
    .venv/bin/python benchmarks/bench_meter.py --host-bound --rounds 10   # the meter on the 0.5 ms tiny-op loop

For each workload, each round runs, one after the other (so the machine's drift falls on all of them alike):
  plain       the loop as it is (its own step times: the truth)
  perturbed   the loop changed the way its bottleneck answers (a second worker, 4x or 2x the batch, foreach Adam)
  metered     the loop with only the step meter installed: the meter's cost
  stepscope   `stepscope run` on the loop: its headline step, phases, verdict and fixes
then more plain and metered pairs up to --cost-pairs, and prints, per workload, medians over the rounds: the meter's
cost (metered / plain - 1, paired, by wall time and by the training thread's CPU time the hooks add, each over the
median step after the warm-up and over every step, the first ones included), the
headline against the plain run's mean step after its warm-up (paired; the headline is a mean step), the perturbation's
answer and stepscope's verdict, and on the storage
loader the data wait against the share a second worker saves plain, with the dataloader_workers estimate.
With --examples, each script of examples/ at its CPU size: plain (its own samples/s line), metered, and the
headline of `stepscope run`, paired per round. OMP_NUM_THREADS=1 throughout. Prints; exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ROOT / "benchmarks" / "meter_workloads.py"
RATE = re.compile(r"([\d.,]+) samples/s")
EXAMPLES = (("cifar_resnet.py", "--image-size", "32", "--batch-size", "16"), ("gpt2_train.py",),
            ("pattern_input_bound.py",), ("pattern_launch_bound.py",), ("pattern_cpu_compute_bound.py",),
            ("pattern_sync_bound.py",), ("pattern_copy_bound.py",), ("pattern_gpu_compute_bound.py",))
WARMUP = 10  # plain steps left out of the plain median (start-up, prefetched batches)
METERED = ("import runpy, sys; from stepscope.capture.meter import StepMeter; "
           "StepMeter(None, live=False).install(); sys.argv = sys.argv[1:]; "
           "runpy.run_path(sys.argv[0], run_name='__main__')")


@dataclass(frozen=True)
class Workload:
    name: str
    base: tuple[str, ...]
    perturbed: tuple[str, ...]
    how: str  # the perturbation, in words
    answer: str  # the pattern the perturbation confirms when it moves the step as expected
    # "faster" (the perturbed step is shorter) | "flat" (4x the samples, the step barely moves) | "double"
    confirms: str


WORKLOADS_ALL = (
    Workload("storage", ("--workers", "1"), ("--workers", "2"), "a second worker", "input_bound", "faster"),
    Workload("transform", (), ("--workers", "2"), "two workers", "input_bound", "faster"),
    Workload("mlp", ("--batch", "8"), ("--batch", "32"), "4x the batch", "python_overhead", "flat"),
    Workload("conv", ("--batch", "16"), ("--batch", "32"), "2x the batch", "cpu_compute_bound", "double"),
    Workload("optim", ("--batch", "8"), ("--batch", "8", "--cheap-opt"), "foreach Adam", "optimizer phase", "faster"),
    Workload("handoff", ("--batch", "16", "--workers", "2"), ("--batch", "16"), "no workers", "input_bound",
             "faster"),
)


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}


@dataclass(frozen=True)
class Timed:
    """One run of a loop: each step's wall time and the training thread's CPU time (ns), in order."""

    wall: list[int]
    cpu: list[int]

    @property
    def median(self) -> float:
        """The median step after the warm-up (robust to a stray slow step)."""
        return float(statistics.median(self.wall[WARMUP:]))

    @property
    def mean(self) -> float:
        """The mean step after the warm-up: what a headline (a mean step; samples/s is the batch over it) is set
        against."""
        return float(statistics.mean(self.wall[WARMUP:]))


def timed(work: Workload, args: tuple[str, ...], steps: int, tmp: Path, metered: bool = False) -> Timed:
    times = tmp / "times.json"
    head = [sys.executable, "-c", METERED] if metered else [sys.executable]
    subprocess.run([*head, str(WORKLOADS), work.name, *args, "--steps", str(steps), "--times", str(times)],
                   check=True, env=env(), capture_output=True)
    found = json.loads(times.read_text())
    return Timed(found["wall"], found["cpu"])


def pair(work: Workload, steps: int, tmp: Path, *, metered_first: bool) -> tuple[Timed, Timed]:
    """The loop plain and with the meter, one after the other; which runs first alternates from pair to pair, so a
    drift of the machine's speed does not fall on one side only."""
    if metered_first:
        metered = timed(work, work.base, steps, tmp, metered=True)
        return timed(work, work.base, steps, tmp), metered
    base = timed(work, work.base, steps, tmp)
    return base, timed(work, work.base, steps, tmp, metered=True)


def cost(plain: Timed, metered: Timed) -> tuple[float, float, float, float]:
    """The meter's cost against the plain run, as a share of the plain step: by wall time (median step after the
    warm-up; every step, the first included) and by the training thread's CPU time (the same two), the CPU time
    the hooks added set against the plain wall step (what a CPU-bound loop would lose)."""
    after, every = (metered.median / plain.median - 1), sum(metered.wall) / sum(plain.wall) - 1
    cpu_after = (statistics.median(metered.cpu[WARMUP:]) - statistics.median(plain.cpu[WARMUP:])) / plain.median
    cpu_every = (sum(metered.cpu) - sum(plain.cpu)) / sum(plain.wall)
    return after, every, cpu_after, cpu_every


def under_stepscope(work: Workload, steps: int, tmp: Path, skip: int | None = None) -> dict:
    out = tmp / "run"
    extra = ["--skip", str(skip)] if skip is not None else []
    subprocess.run([sys.executable, "-m", "stepscope", "run", "-o", str(out), "-f", "--telemetry-interval", "0",
                    *extra, str(WORKLOADS), work.name, *work.base, "--steps", str(steps)],
                   check=True, env=env(), capture_output=True, cwd=tmp)
    return json.loads((out / "report.json").read_text())


def confirmed(work: Workload, base: float, perturbed: float) -> bool:
    ratio = base / perturbed
    if work.confirms == "faster":
        return ratio >= 1.15
    if work.confirms == "flat":
        return perturbed / base <= 2.0  # 4x the samples in at most 2x the time: the step is mostly overhead
    return perturbed / base >= 1.6  # 2x the batch, ~2x the time: the math is the step


def example_rate(command: list[str], metered: bool = False) -> float | None:
    head = [sys.executable, "-c", METERED] if metered else [sys.executable]
    done = subprocess.run([*head, *command], capture_output=True, text=True, env=env(), cwd=ROOT)
    found = RATE.findall(done.stdout)
    return float(found[-1].replace(",", "")) if found else None


def examples(rounds: int, only: list[str] | None) -> None:
    """Each example at its CPU size: the meter's cost and the headline against the plain run, paired per round."""
    print("| example | plain samples/s | meter cost | stepscope headline vs plain | verdict |")
    print("|---|---|---|---|---|")
    for example in EXAMPLES:
        if only and example[0].removesuffix(".py") not in only:
            continue
        command = [str(ROOT / "examples" / example[0]), *example[1:], "--device", "cpu"]
        costs, errors, plains, verdict = [], [], [], "-"
        with tempfile.TemporaryDirectory() as d:
            for _ in range(rounds):
                plain_rate = example_rate(command)
                metered_rate = example_rate(command, metered=True)
                out = Path(d) / "run"
                subprocess.run([sys.executable, "-m", "stepscope", "run", "-o", str(out), "-f",
                                "--telemetry-interval", "0", *command], capture_output=True, env=env(), cwd=d)
                report = json.loads((out / "report.json").read_text()) if (out / "report.json").is_file() else None
                if not plain_rate or not metered_rate or report is None:
                    continue
                plains.append(plain_rate)
                costs.append(plain_rate / metered_rate - 1)  # time per sample, metered over plain
                rate = report["summary"].get("samples_per_s")
                if rate:
                    errors.append(plain_rate / rate - 1)  # the headline's step over the plain step
                verdict = report["patterns"][0]["id"] if report["patterns"] else "-"
        if not plains:
            print(f"| {example[0]} | failed | | | |", flush=True)
            continue
        cost = f"{statistics.median(costs):+.2%} ({min(costs):+.1%}..{max(costs):+.1%})"
        err = f"{statistics.median(errors):+.1%} ({min(errors):+.1%}..{max(errors):+.1%})" if errors else "-"
        print(f"| {example[0]} | {statistics.median(plains):,.1f} | {cost} | {err} | {verdict} |", flush=True)


def in_process(rounds: int, steps: int = 300, workload: str = "mlp") -> None:
    """The meter's cost per step in this process, on the MLP workload (the most hooks per µs of step) or the tiny-op
    loop with no DataLoader (`tiny`): segments of `steps` steps plain, with the meter's C hooks and with its Python
    hooks, in an order that rotates each round, each segment's 10th-percentile step on the thread's CPU clock (another
    process's load moves it less than the wall clock); the median of the paired differences."""
    sys.path.insert(0, str(WORKLOADS.parent))
    os.environ["OMP_NUM_THREADS"] = "1"
    import time

    import meter_workloads
    import torch

    from stepscope.capture.meter import StepMeter
    from stepscope.capture.meter.native import OFF_SWITCH, native_hooks

    torch.set_num_threads(1)
    if workload == "tiny":
        model, opt, batches = meter_workloads.tiny(4)
    else:
        model, opt, loader = meter_workloads.build("mlp", 8, 0, False)
        batches = iter(loader)
    lossf = torch.nn.CrossEntropyLoss()

    def segment(n: int) -> float:
        times, last = [], time.thread_time_ns()
        for _ in range(n):
            x, y = next(batches)
            opt.zero_grad()
            lossf(model(x), y).backward()
            opt.step()
            now = time.thread_time_ns()
            times.append(now - last)
            last = now
        # The 10th percentile: on a shared machine another process's load only ever adds to a step, so the least
        # disturbed steps say the hooks' own cost best (the median moves by tens of µs between segments there).
        return statistics.quantiles(times, n=10)[0]

    def metered(n: int, hooks: str) -> float:
        os.environ[OFF_SWITCH] = "1" if hooks == "Python" else "0"
        meter = StepMeter(None, live=False).install()
        segment(5)  # the model found, the weaker sources muted
        try:
            return segment(n)
        finally:
            meter.remove()

    kinds = ["plain", "Python"] + (["C"] if native_hooks(time.perf_counter_ns) is not None else [])
    segment(steps)
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for i in range(rounds):  # the order rotates: what runs next pays for what ran before (caches, the heap)
        for kind in kinds[i % len(kinds):] + kinds[:i % len(kinds)]:
            times[kind].append(segment(steps) if kind == "plain" else metered(steps, kind))
    plain_step = statistics.median(times["plain"])
    print(f"in process, {workload}: plain {plain_step / 1e3:.0f} µs per step, median of {rounds} rounds of "
          f"{steps}-step segments")
    for kind in kinds[1:]:
        diffs = [m - p for m, p in zip(times[kind], times["plain"], strict=True)]
        cost = statistics.median(diffs)
        low, _, high = statistics.quantiles(diffs, n=4)
        print(f"  the meter, {kind} hooks: {cost / 1e3:+.1f} µs per step (quartiles {low / 1e3:+.1f}.."
              f"{high / 1e3:+.1f}) = {cost / plain_step:+.2%}")


IMPORTED = ("import runpy, sys; import stepscope.capture.meter; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
MEDIAN = re.compile(r"median step ([\d.]+) us")


def host_bound(pairs: int, steps: int) -> None:
    """The meter's cost on the host-bound loop of tiny ops with no DataLoader (meter_workloads.py `tiny`, ~0.5 ms
    a step): the script's own median step, run plain, through runpy with stepscope's meter imported but not installed
    (the launch's own effect), under the meter alone and under `stepscope run --full`, in processes one after the
    other, the order rotating each round; the median of the per-round ratios to plain (the meter's also to the
    imported run's)."""
    script = [str(WORKLOADS), "tiny", "--steps", str(steps)]
    with tempfile.TemporaryDirectory() as d:
        commands = {"plain": [sys.executable, *script], "imported": [sys.executable, "-c", IMPORTED, *script],
                    "meter": [sys.executable, "-c", METERED, *script],
                    "run --full": [sys.executable, "-m", "stepscope", "run", "-o", str(Path(d) / "run"), "-f",
                                   "--full", "--telemetry-interval", "0", *script]}

        def median_us(kind: str) -> float:
            done = subprocess.run(commands[kind], capture_output=True, text=True, env=env(), cwd=d, check=True)
            return float(MEDIAN.findall(done.stdout)[-1])

        kinds = list(commands)
        medians: dict[str, list[float]] = {kind: [] for kind in kinds}
        for i in range(pairs):
            for kind in kinds[i % len(kinds):] + kinds[:i % len(kinds)]:
                medians[kind].append(median_us(kind))
    plain = medians["plain"]
    print(f"host-bound tiny-op loop ({steps} steps): plain median step {statistics.median(plain):.1f} us "
          f"({min(plain):.1f}..{max(plain):.1f}), {pairs} rounds")
    for kind in kinds[1:]:
        ratios = [m / p - 1 for m, p in zip(medians[kind], plain, strict=True)]
        diffs = [m - p for m, p in zip(medians[kind], plain, strict=True)]
        print(f"  {kind}: {statistics.median(ratios):+.2%} ({min(ratios):+.1%}..{max(ratios):+.1%}) = "
              f"{statistics.median(diffs):+.1f} us per step")
    over = [m / i - 1 for m, i in zip(medians["meter"], medians["imported"], strict=True)]
    print(f"  meter against imported: {statistics.median(over):+.2%} ({min(over):+.1%}..{max(over):+.1%})")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", nargs="*")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--examples", action="store_true", help="the examples/ scripts instead of the workloads")
    p.add_argument("--cost-pairs", type=int, default=6,
                   help="plain and metered runs paired for the meter's cost (the rounds' own, then more)")
    p.add_argument("--skip", type=int, default=None, help="stepscope run's --skip (default: its own)")
    p.add_argument("--in-process", action="store_true", help="the meter's cost per step in this process (MLP)")
    p.add_argument("--host-bound", action="store_true", help="the meter on the 0.5 ms loop of tiny ops")
    args = p.parse_args()
    if args.host_bound:
        host_bound(args.rounds, max(args.steps, 3000))
        return
    if args.in_process:
        in_process(max(args.rounds, 8), workload=args.only[0] if args.only else "mlp")
        return
    if args.examples:
        examples(args.rounds, args.only)
        return
    rows = []
    for work in WORKLOADS_ALL:
        if args.only and work.name not in args.only:
            continue
        costs, headline, bases, perturbs, reports = [], [], [], [], []
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for i in range(args.rounds):
                base, metered = pair(work, args.steps, tmp, metered_first=i % 2 == 1)
                perturbed = timed(work, work.perturbed, args.steps, tmp).median
                report = under_stepscope(work, args.steps, tmp, args.skip)
                costs.append(cost(base, metered))
                headline.append(report["summary"]["step_time_us"] * 1e3 / base.mean - 1)
                bases.append(base.median)
                perturbs.append(perturbed)
                reports.append(report)
                print(f"  {work.name}: plain {base.median / 1e6:.2f} ms, metered {metered.median / 1e6:.2f} ms, "
                      f"{work.how} {perturbed / 1e6:.2f} ms, stepscope headline "
                      f"{report['summary']['step_time_us'] / 1e3:.2f} ms, verdict "
                      f"{report['patterns'][0]['id'] if report['patterns'] else '-'}", flush=True)
            for i in range(args.rounds, args.cost_pairs):  # more pairs for the meter's cost alone
                costs.append(cost(*pair(work, args.steps, tmp, metered_first=i % 2 == 1)))
        rows.append(summarize(work, costs, headline, bases, perturbs, reports))
    print()
    print("| workload | plain step | meter cost by wall time (median step after 10; every step) | by the training "
          "thread's CPU time (after 10; every step) | headline vs plain mean | perturbation | its answer | verdict "
          "| phases |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def summarize(work: Workload, costs: list[tuple[float, float, float, float]], headline: list[float],
              bases: list[float], perturbs: list[float], reports: list[dict]) -> list[str]:
    base, perturbed = statistics.median(bases), statistics.median(perturbs)
    answer = work.answer if confirmed(work, base, perturbed) else f"not {work.answer}"
    verdicts = [r["patterns"][0]["id"] if r["patterns"] else "-" for r in reports]
    meters = [r.get("meter") for r in reports]
    phases = _phases_text(meters[-1])  # the last round's, as an example
    if work.name == "optim":
        shares = [next((ph["share"] for ph in m["phases"] if ph["name"] == "optimizer"), 0.0) for m in meters if m]
        verdicts = [f"optimizer {statistics.median(shares):.0%} of the step (saved plain: {1 - perturbed / base:.0%})"]
    if work.name == "handoff":
        rec = [next((r for r in rep["recommendations"] if r["id"] == "dataloader_workers"), None) for rep in reports]
        said = [(r["evidence"].get("suggested_workers"), r["estimated_speedup"]) if r else None for r in rec]
        verdicts.append(f"dataloader_workers (suggested workers, estimate) {said} vs measured "
                        f"{base / perturbed:.2f}x with none")
    if work.name == "storage":
        data = [next(ph["share"] for ph in m["phases"] if ph["name"] == "data") for m in meters if m]
        est = [next((r["estimated_speedup"] for r in rep["recommendations"] if r["id"] == "dataloader_workers"), None)
               for rep in reports]
        verdicts.append(f"data wait {statistics.median(data):.0%} >= saved plain {1 - perturbed / base:.0%}; "
                        f"dataloader_workers estimates {est} vs measured {base / perturbed:.2f}x")
    return [work.name, f"{base / 1e6:.2f} ms", _cost_text([c[0] for c in costs], [c[1] for c in costs]),
            _cost_text([c[2] for c in costs], [c[3] for c in costs]) + f" ({len(costs)} pairs)",
            f"{statistics.median(headline):+.1%} ({min(headline):+.1%}..{max(headline):+.1%})",
            f"{work.how}: {perturbed / base:.2f}x the step", answer, "; ".join(verdicts), phases]


def _cost_text(after: list[float], every: list[float]) -> str:
    return (f"{statistics.median(after):+.2%} ({min(after):+.1%}..{max(after):+.1%}); every step "
            f"{statistics.median(every):+.2%} ({min(every):+.1%}..{max(every):+.1%})")


def _phases_text(meter: dict | None) -> str:
    if not meter:
        return "-"
    return " ".join(f"{ph['name']} {ph['share']:.0%}" for ph in meter["phases"] if ph["share"] >= 0.01)


if __name__ == "__main__":
    main()
