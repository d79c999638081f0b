"""Pattern `copy_bound`: large pageable float32 batches copied host-to-device every step.

Each batch is 64 float32 images of 3x224x224 (38.5 MB) in pageable memory, and the model is a tiny
strided conv, so on a GPU the synchronous pageable H2D copy is most of the step. The batches come
ready-made from a small pool (no per-sample collate), so loading costs next to nothing and the copy
stands alone. On a CPU
`.to("cpu")` is a no-op, so the pattern does not exist there: what remains is the collate memcpy
(and the default image size drops to 112 to keep the run short).

    python examples/pattern_copy_bound.py                        # on a GPU: the copy dominates
    python examples/pattern_copy_bound.py --pin-memory --uint8   # fix

Fixes: `--pin-memory` (DataLoader `pin_memory=True` + `.to(device, non_blocking=True)`: faster, and
asynchronous, so it overlaps compute) and `--uint8` (send uint8 pixels, a quarter of the bytes, and
convert + normalise on the device).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class BatchPool(Dataset):
    """`length` ready-made batches drawn from a pool of 4, as float32 (normalised) or uint8; indexed by
    batch number (the DataLoader runs with batch_size=None), so loading is a lookup, not a collate."""

    def __init__(self, length: int, batch: int, size: int, uint8: bool, pool: int = 4) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (pool, batch, 3, size, size), dtype=torch.uint8, generator=g)
        if not uint8:  # the costly choice: 4 bytes a pixel cross the bus instead of 1
            self.images = (self.images.float() - 128.0) / 64.0
        self.labels = torch.arange(batch) % 10
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[i % len(self.images)], self.labels


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps to run in total")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=None, help="default: 224 on CUDA, 112 on CPU")
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    p.add_argument("--pin-memory", action="store_true", help="fix: pinned memory + non_blocking copies")
    p.add_argument("--uint8", action="store_true", help="fix: copy uint8, normalise on the device")
    args = p.parse_args()
    device = torch.device(args.device)
    if args.image_size is None:  # on a CPU there is no copy to show; keep the run short
        args.image_size = 224 if device.type == "cuda" else 112
    pin = args.pin_memory and device.type == "cuda"  # nothing to pin for a CPU target

    dataset = BatchPool(args.steps, args.batch_size, args.image_size, args.uint8)
    loader = DataLoader(dataset, batch_size=None, num_workers=args.workers, pin_memory=pin)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 8, stride=8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    t0, step = time.perf_counter(), 0
    for images, labels in loader:
        batch_mb = images.nelement() * images.element_size() / 1e6
        images = images.to(device, non_blocking=pin)  # pageable float32: a blocking ~38 MB copy
        labels = labels.to(device, non_blocking=pin)
        if args.uint8:
            images = (images.float() - 128.0) / 64.0
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step == 1:  # start the clock after the first step (allocator and kernel warm-up)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed, timed = time.perf_counter() - t0, max(step - 1, 1)
    print(f"pattern_copy_bound: {step} steps, {batch_mb:.1f} MB/batch on {device}: "
          f"{timed * args.batch_size / elapsed:.1f} samples/s ({1e3 * elapsed / timed:.1f} ms/step)")  # fmt: skip


if __name__ == "__main__":
    main()
