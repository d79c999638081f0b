"""Make the real multi-rank fixtures: DDP on the gloo backend (CPU), one rank made a straggler on purpose.

    torchrun --nproc_per_node 4 tests/data/gloo_ddp/make_traces.py OUT_DIR --straggler 2 --cause dataloader

Every rank trains the same small MLP on random data and records steps 2..5 with the PyTorch profiler
(record_shapes on); each writes OUT_DIR/rank<N>.json.gz. The straggler's DataLoader sleeps (cause dataloader)
or it runs extra matrix products before its forward pass (cause compute), --delay-ms per step either way.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

BATCH = 32
STEPS = 6


class RandomItems(Dataset):
    """Random features and labels; each item sleeps `delay_s` (a slow decode on one rank)."""

    def __init__(self, n: int, delay_s: float) -> None:
        self.n, self.delay_s = n, delay_s
        self.x, self.y = torch.randn(n, 64), torch.randint(0, 10, (n,))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.x[i], self.y[i]


def burn(seconds: float) -> None:
    """CPU work that shows in the trace as ops: matrix products until `seconds` have passed."""
    a = torch.randn(256, 256)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        a = torch.tanh(a @ a)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--straggler", type=int, default=2)
    parser.add_argument("--cause", choices=("dataloader", "compute"), default="dataloader")
    parser.add_argument("--delay-ms", type=float, default=15.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    slow = rank == args.straggler
    delay_s = args.delay_ms / 1000
    items = RandomItems(BATCH * STEPS, delay_s / BATCH if slow and args.cause == "dataloader" else 0.0)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=STEPS - 2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                                record_shapes=True) as prof:
        for x, y in DataLoader(items, batch_size=BATCH):
            if slow and args.cause == "compute":
                burn(delay_s)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    os.makedirs(args.out, exist_ok=True)
    prof.export_chrome_trace(os.path.join(args.out, f"rank{rank}.json.gz"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
