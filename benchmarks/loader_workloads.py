"""Two DataLoader-bound CPU training loops (issue 41.5), runnable plain or under `stepscope run`:

    python benchmarks/loader_workloads.py NAME [--workers W] [--persistent] [--steps N] [--times FILE]

  sleep     each sample waits 8 ms (a sleep: storage or a network, no CPU), batch 16, a small conv net: workers
            wait side by side, so more of them than cores still help
  bigbatch  a Lightning-like loop whose batches are 64 x 131072 float32 (32 MB) collated from in-memory samples,
            a linear model on them: in workers each batch crosses to the main process through shared memory

The loop times its own steps (batch fetched to optimizer step done, host clock); --times writes them as JSON
(`{"wall": [ns, ...]}`), the plain run's truth that an estimate is set against. One epoch is --epoch batches
(default: the whole run), so a short epoch restarts the workers unless --persistent.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch.utils.data import DataLoader, Dataset

SAMPLE = 131072  # bigbatch: float32 per sample; 64 of them are 32 MB


class Sleeping(Dataset):
    def __init__(self, n: int, wait_s: float = 0.008) -> None:
        self.n, self.wait_s = n, wait_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.wait_s)
        return torch.zeros(3, 32, 32), i % 10


class InMemory(Dataset):
    """Samples held in memory (a pool of 64 rows): a batch is their collation, a 32 MB copy."""

    def __init__(self, n: int) -> None:
        self.n, self.pool = n, torch.rand(64, SAMPLE)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.pool[i % 64], i % 10


def build(name: str, n: int) -> tuple[torch.nn.Module, Dataset, int]:
    torch.manual_seed(0)
    if name == "sleep":
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(4),
                                    torch.nn.Flatten(), torch.nn.Linear(16 * 8 * 8, 10))
        return model, Sleeping(n * 16), 16
    if name == "bigbatch":
        model = torch.nn.Sequential(torch.nn.Linear(SAMPLE, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
        return model, InMemory(n * 64), 64
    raise SystemExit(f"loader_workloads.py: unknown workload {name!r} (sleep, bigbatch)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--persistent", action="store_true")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--epoch", type=int, default=0, help="batches per epoch (0: one epoch of --steps)")
    p.add_argument("--times")
    args = p.parse_args()
    torch.set_num_threads(1)  # the loop's own thread; the cores left are the workers'
    model, data, batch = build(args.name, args.epoch or args.steps)
    extra = {"multiprocessing_context": "fork", "persistent_workers": args.persistent} if args.workers else {}
    loader = DataLoader(data, batch_size=batch, num_workers=args.workers, **extra)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times: list[int] = []
    last = time.perf_counter_ns()
    while len(times) < args.steps:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            now = time.perf_counter_ns()
            times.append(now - last)
            last = now
            if len(times) >= args.steps:
                break
    if args.times:
        with open(args.times, "w") as f:
            json.dump({"wall": times}, f)


if __name__ == "__main__":
    main()
