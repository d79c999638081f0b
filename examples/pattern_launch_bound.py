"""Pattern `launch_bound`: thousands of tiny ops per step, so per-op overhead is the whole step.

A stack of `--depth` (default 200) Linear layers of width 8 on a batch of 4: every kernel runs for a
microsecond or two while the host spends several microseconds launching it, so on a GPU the device sits
in short gaps waiting for the host. On a CPU the same thing shows as dispatcher/framework overhead:
the step time is per-op overhead, not arithmetic (a few hundred FLOP per op).

    python examples/pattern_launch_bound.py               # ~3,800 tiny ops per step
    python examples/pattern_launch_bound.py --compile     # fix (CUDA graphs on a GPU)

Fixes: `--compile` (torch.compile; mode "reduce-overhead" on CUDA, which replays the step's kernels
as one CUDA graph; on a 2-core CPU compiling the 200 layers takes about a minute), fewer and bigger
ops (`--depth`, `--width`, `--batch-size`), fused or `foreach` optimizers.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps to run in total")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--depth", type=int, default=200, help="tiny Linear+ReLU layers in the stack")
    p.add_argument("--compile", action="store_true", help="fix: torch.compile the model")
    args = p.parse_args()
    device = torch.device(args.device)

    torch.manual_seed(0)
    n = args.steps * args.batch_size
    data = TensorDataset(torch.randn(n, args.width), torch.randn(n, args.width))
    # batch_size=None + a BatchSampler: one fancy-index per batch keeps loading cheap and out of the way
    sampler = BatchSampler(RandomSampler(data), args.batch_size, drop_last=True)
    loader = DataLoader(data, sampler=sampler, batch_size=None)
    layers: list[nn.Module] = []
    for _ in range(args.depth):
        layers += [nn.Linear(args.width, args.width), nn.ReLU()]
    model: nn.Module = nn.Sequential(*layers).to(device)
    if args.compile:  # CUDA graphs remove the per-kernel launch cost; on CPU, fusion cuts the op count
        mode = "reduce-overhead" if device.type == "cuda" else "default"
        model = torch.compile(model, mode=mode)  # type: ignore[assignment]
    # foreach=False: one small update per parameter tensor, as optimizers did before multi-tensor apply
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=False)

    t0, step = time.perf_counter(), 0
    for x, target in loader:
        loss = nn.functional.mse_loss(model(x.to(device)), target.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step == 1:  # start the clock after the first step (compile, allocator, kernel warm-up)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed, timed = time.perf_counter() - t0, max(step - 1, 1)
    print(f"pattern_launch_bound: {step} steps, depth {args.depth} on {device}: "
          f"{1e3 * elapsed / timed:.1f} ms/step, {timed * args.batch_size / elapsed:.1f} samples/s")  # fmt: skip


if __name__ == "__main__":
    main()
