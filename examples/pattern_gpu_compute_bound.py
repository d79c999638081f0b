"""Pattern `gpu_compute_bound`: large matmuls keep the device busy without gaps (the good state).

An MLP of `--depth` square Linear layers of `--width` (4096 on a GPU: ~0.8 TFLOP per step at batch
1024) with nothing in the loop that syncs, so the host queues work ahead and the GPU never waits for
it. Batches come from a cheap in-memory dataset. On a CPU the same loop is bound by the CPU's
arithmetic (the width defaults to 512 there so the run stays short).

    python examples/pattern_gpu_compute_bound.py              # GPU busy > 90%
    python examples/pattern_gpu_compute_bound.py --amp        # faster still: bf16 tensor cores

There is no bottleneck to remove, only the work to make cheaper: `--amp` (bf16 autocast), `--tf32`
(TF32 matmuls for the float32 path on Ampere and later), torch.compile, fused kernels, a bigger GPU.
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
    p.add_argument("--batch-size", type=int, default=None, help="default: 1024 on CUDA, 256 on CPU")
    p.add_argument("--width", type=int, default=None, help="default: 4096 on CUDA, 512 on CPU")
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--amp", action="store_true", help="bf16 autocast")
    p.add_argument("--tf32", action="store_true", help="allow TF32 for float32 matmuls")
    args = p.parse_args()
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    width = args.width or (4096 if on_gpu else 512)
    batch = args.batch_size or (1024 if on_gpu else 256)
    if args.tf32:  # float32 matmuls run in full precision by default
        torch.set_float32_matmul_precision("high")

    torch.manual_seed(0)
    n = args.steps * batch
    data = TensorDataset(torch.randn(n, width), torch.randint(0, 10, (n,)))
    # batch_size=None + a BatchSampler: one fancy-index per batch keeps loading cheap and out of the way
    sampler = BatchSampler(RandomSampler(data), batch, drop_last=True)
    loader = DataLoader(data, sampler=sampler, batch_size=None, pin_memory=on_gpu)
    layers: list[nn.Module] = []
    for _ in range(args.depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    t0, step = time.perf_counter(), 0
    for x, y in loader:
        x, y = x.to(device, non_blocking=on_gpu), y.to(device, non_blocking=on_gpu)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp):
            loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step == 1:  # start the clock after the first step (allocator, cuBLAS warm-up)
            if on_gpu:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
    if on_gpu:
        torch.cuda.synchronize()
    elapsed, timed = time.perf_counter() - t0, max(step - 1, 1)
    flops = 6 * batch * (args.depth * width * width + width * 10)  # fwd + bwd, 2 FLOP per MAC
    print(f"pattern_gpu_compute_bound: {step} steps, width {width}, batch {batch} on {device}: "
          f"{timed * batch / elapsed:.1f} samples/s, {timed * flops / elapsed / 1e12:.3g} TFLOP/s")  # fmt: skip


if __name__ == "__main__":
    main()
