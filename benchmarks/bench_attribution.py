"""Overhead of source attribution inside the recorded window, and none outside it.

Times training steps of small CPU models in interleaved blocks, all under a recording torch.profiler,
in CPU time of the one thread doing the work: the profiler alone, the profiler with stepscope's
attribution (line + module ranges), and, for reference, the profiler's own Python stacks
(with_stack=True, with_modules=True). Prints each median step time and its ratio to the profiler
alone; then the unprofiled step before attribution ever started and after it stopped (ratio ~1.0:
nothing is left behind).

    .venv/bin/python benchmarks/bench_attribution.py [--rounds 7] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from stepscope.attribution import Attribution


def tiny() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The worst case: every op is tiny, so per-op costs are all there is."""
    layers = [m for _ in range(4) for m in (nn.Linear(32, 32), nn.ReLU())]
    return nn.Sequential(*layers, nn.Linear(32, 10)), torch.randn(8, 32), torch.randint(0, 10, (8,))


def mlp() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    return model, torch.randn(64, 256), torch.randint(0, 10, (64,))


def cnn() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    def block(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2))

    model = nn.Sequential(block(3, 32), block(32, 64), block(64, 64), nn.Flatten(), nn.Linear(64 * 4 * 4, 10))
    return model, torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))


def stepper(build: Callable) -> Callable[[], None]:
    model, x, y = build()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()

    return step


def timed(step: Callable[[], None], steps: int) -> float:
    """Mean µs of this thread's CPU time per step: with one intra-op thread that is all the step's work, and
    it does not count time lost to other processes on a busy machine, as wall-clock time would."""
    t0 = time.thread_time()
    for _ in range(steps):
        step()
    return (time.thread_time() - t0) / steps * 1e6


def block(step: Callable[[], None], steps: int, variant: str) -> float:
    if variant == "none":
        return timed(step, steps)
    stacks = variant == "with_stack"
    with profile(activities=[ProfilerActivity.CPU], with_stack=stacks, with_modules=stacks):
        if variant == "attribution":
            with Attribution():
                return timed(step, steps)
        return timed(step, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name, build in (("tiny", tiny), ("mlp", mlp), ("cnn", cnn)):
        step = stepper(build)
        for _ in range(5):
            step()
        before = [block(step, args.steps, "none") for _ in range(3)]
        times: dict[str, list[float]] = {"profiler": [], "attribution": [], "with_stack": []}
        for _ in range(args.rounds):  # interleaved, so drifts in machine load hit every variant alike
            for variant in times:
                times[variant].append(block(step, args.steps, variant))
        after = [block(step, args.steps, "none") for _ in range(3)]
        base = statistics.median(times["profiler"])
        print(f"{name}: recorded step (CPU time), median of {args.rounds} blocks of {args.steps} steps")
        for variant, values in times.items():
            print(f"  {variant:12s} {statistics.median(values):9.0f} µs   x{statistics.median(values) / base:.2f}")
        print(f"  unprofiled   before {min(before):.0f} µs, after stop {min(after):.0f} µs "
              f"(x{min(after) / min(before):.2f})")


if __name__ == "__main__":
    main()
