"""Pattern `input_bound`: the training step waits on the DataLoader.

Each sample costs real, single-threaded numpy work in `__getitem__` (a stand-in for JPEG decode and
augmentation; about 15 ms a batch of 32 on a 2-core CPU), and the model is small, so with the default
`--workers 0` the main process spends most of each step inside `next(iter(loader))`. This holds on a
GPU and on a CPU (where the model runs single-threaded, leaving a core to the workers).

    python examples/pattern_input_bound.py --report-wait              # waits most of the step
    python examples/pattern_input_bound.py --report-wait --workers 2  # fix: worker processes

`--io-ms M` adds M ms of storage latency per sample (with `--work 0`: loading bound by I/O, not CPU).
Workers overlap waiting on storage whatever the core count, so on a 2-core machine this is the mode
whose fix is complete; CPU-bound loading can only be hidden while the cores are not all busy.

Fix: `--workers N` (DataLoader num_workers). The wait goes away once N workers produce a batch
at least as fast as the step consumes it (N >= load time per batch / compute time per step, with
N spare cores): 2 on a 2-core CPU, more on a GPU, where the step takes only a few milliseconds.
`persistent_workers`, prefetching and cheaper transforms help too.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    """Random images made per item from a seed, then blurred `work` times in numpy."""

    def __init__(self, length: int, size: int, work: int, io_ms: float = 0.0) -> None:
        self.length, self.size, self.work, self.io_ms = length, size, work, io_ms

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.io_ms:  # storage latency (a network file system, an object store): idle, not CPU
            time.sleep(self.io_ms / 1000)
        rng = np.random.default_rng(i)
        img = rng.random((self.size, self.size, 3), dtype=np.float32)
        for _ in range(self.work):  # the expensive per-sample transform: this is what workers parallelise
            img = 0.25 * (np.roll(img, 1, 0) + np.roll(img, -1, 0) + np.roll(img, 1, 1) + np.roll(img, -1, 1))
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))), int(rng.integers(10))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps to run in total")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--work", type=int, default=8, help="numpy blur passes per sample (data cost)")
    p.add_argument("--io-ms", type=float, default=0.0,
                   help="storage latency per sample in ms (waiting, not CPU): loading bound by I/O")
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers: the fix")
    p.add_argument("--report-wait", action="store_true", help="print time spent waiting for batches")
    args = p.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":  # a small model gains little from threads, and they would fight the workers
        torch.set_num_threads(1)

    torch.manual_seed(0)
    dataset = SlowDataset(args.steps * args.batch_size, args.image_size, args.work, args.io_ms)  # one epoch
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    ).to(device)  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    waits: list[float] = []
    steps: list[float] = []
    t_prev = time.perf_counter()
    for images, labels in loader:
        t_got = time.perf_counter()  # t_got - t_prev is the time spent in the loader's __next__
        loss = nn.functional.cross_entropy(model(images.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        t_now = time.perf_counter()
        waits.append(t_got - t_prev)
        steps.append(t_now - t_prev)
        t_prev = t_now

    warm = 2 if len(steps) > 3 else 0  # the first batches include worker start-up
    wait, step = float(np.mean(waits[warm:])), float(np.mean(steps[warm:]))
    print(f"pattern_input_bound: {len(steps)} steps, workers {args.workers}: "
          f"{args.batch_size / step:.1f} samples/s ({1e3 * step:.1f} ms/step)")  # fmt: skip
    if args.report_wait:
        print(f"  DataLoader wait {1e3 * wait:.1f} ms of {1e3 * step:.1f} ms per step ({wait / step:.0%})")


if __name__ == "__main__":
    main()
