"""CPU training loops of each shape the step meter must read right, runnable plain or under `stepscope run`.

    python benchmarks/meter_workloads.py NAME [--batch B] [--workers W] [--steps N] [--times FILE] [--cheap-opt]

Each loop times its own steps (optimizer step to optimizer step, host clock) and, with --times, writes them as JSON:
the plain run's truth that stepscope's meter is set against. Beside them (`{"wall": [...], "cpu": [...]}`) the training
thread's CPU time per step: what the meter's hooks add to it is their cost, which another process's load moves less
than it moves the wall clock. The shapes (what perturbing them answers):
  storage    one worker waiting on storage (a sleep per sample, no CPU): 2 workers halve the step -> input_bound
  transform  a CPU transform in the main process (num_workers=0): workers take it off the step -> input_bound
  mlp        a deep narrow MLP, batch 8: 4x the batch barely moves the step -> python_overhead (per-op dispatch)
  conv       a conv net on 64x64 images: 2x the batch doubles the step -> cpu_compute_bound
  optim      a model of many small tensors under Adam (for-loop): a foreach Adam shortens it -> the optimizer phase
  handoff    tiny in-memory samples behind 2 workers (run with --workers 2): the workers idle while the loop waits for
             their batches to cross between processes; num_workers=0 shortens it -> input_bound, load in the main
             process
  tiny       a host-bound loop of tiny ops with no DataLoader: a 12-layer 32-wide MLP, batch 4, one tensor made once
             (~0.5 ms a step on one thread): the meter's cost where it weighs the most (issue 40 item 6). It prints
             its own median step after the warm-up (`median step 512.3 us`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Dataset

WARMUP = 10  # steps left out of the printed median (start-up)


class Storage(Dataset):
    """Each sample waits on 'storage' (a sleep: no CPU), then is a small image."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.wait_s)
        return torch.zeros(3, 32, 32), i % 10


class Transformed(Dataset):
    """Each sample is made by a CPU transform (a few convolutions' worth of tensor math)."""

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(i)
        x = torch.rand(3, 64, 64, generator=g)
        for _ in range(6):
            x = torch.nn.functional.avg_pool2d(x.unsqueeze(0), 3, 1, 1).squeeze(0) * 1.01
        return x[:, ::2, ::2].contiguous(), i % 10


class InMemory(Dataset):
    def __init__(self, shape: tuple[int, ...]) -> None:
        self.x = torch.rand(*shape)

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.x, i % 10


def small_conv() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(4),
                               torch.nn.Flatten(), torch.nn.Linear(16 * 8 * 8, 10))


def build(name: str, batch: int, workers: int, cheap_opt: bool) -> tuple[torch.nn.Module, torch.optim.Optimizer,
                                                                           DataLoader]:
    torch.manual_seed(0)
    if name == "storage":
        model, data = small_conv(), Storage(0.001)
    elif name == "transform":
        model, data = small_conv(), Transformed()
    elif name == "mlp":
        layers = [m for _ in range(24) for m in (torch.nn.Linear(64, 64), torch.nn.ReLU())]
        model, data = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 64), *layers,
                                          torch.nn.Linear(64, 10)), InMemory((64,))
    elif name == "conv":
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                                    torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(8),
                                    torch.nn.Flatten(), torch.nn.Linear(32 * 8 * 8, 10))
        data = InMemory((3, 64, 64))
    elif name == "optim":
        model = torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(120)), torch.nn.Flatten(),
                                    torch.nn.Linear(16, 10))
        data = InMemory((16,))
    elif name == "handoff":
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
        data = InMemory((16,))
    else:
        raise SystemExit(f"unknown workload {name!r}")
    if name == "optim":
        opt: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=cheap_opt)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    kwargs = {"multiprocessing_context": "fork"} if workers else {}
    return model, opt, DataLoader(data, batch_size=batch, num_workers=workers, **kwargs)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("name")
    p.add_argument("--batch", type=int, default=None, help="default 32 (tiny: 4)")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--times")
    p.add_argument("--cheap-opt", action="store_true")
    args = p.parse_args()
    if args.name == "tiny":
        model, opt, batches = tiny(args.batch or 4)
    else:
        model, opt, loader = build(args.name, args.batch or 32, args.workers, args.cheap_opt)
        batches = iter(loader)
    times, cpu_times, last, last_cpu = [], [], time.perf_counter_ns(), time.thread_time_ns()
    for i, (x, y) in enumerate(batches):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        now, now_cpu = time.perf_counter_ns(), time.thread_time_ns()
        times.append(now - last)
        cpu_times.append(now_cpu - last_cpu)
        last, last_cpu = now, now_cpu
        if i + 1 >= args.steps:
            break
    if args.times:
        with open(args.times, "w") as f:
            json.dump({"wall": times, "cpu": cpu_times}, f)
    print(f"{args.name}: {len(times)} steps", file=sys.stderr)
    if len(times) > WARMUP:
        print(f"median step {statistics.median(times[WARMUP:]) / 1e3:.1f} us")


def tiny(batch: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, Iterator[tuple[torch.Tensor, torch.Tensor]]]:
    """The host-bound loop: 12 Linear(32, 32) + ReLU, SGD, the same batch every step (no DataLoader)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(m for _ in range(12) for m in (torch.nn.Linear(32, 32), torch.nn.ReLU())),
                                torch.nn.Linear(32, 10))
    x, y = torch.randn(batch, 32), torch.randint(0, 10, (batch,))
    return model, torch.optim.SGD(model.parameters(), lr=0.01), itertools.repeat((x, y))


if __name__ == "__main__":
    main()
