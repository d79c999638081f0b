"""A model whose big matrix product sits on one known line: the ground truth for kernel time by line.

`BIG_MATMUL_LINE` below is the line number of `h = x @ self.w_big`; it holds nearly all FLOPs:
2 * batch * width * width forward, twice that backward (grad input and grad weight). The small head
(`h @ self.w_head`) is ~1/1000 of it. Run: `stepscope run tests/gpu/big_matmul.py` on a GPU.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn


class BigThenSmall(nn.Module):
    def __init__(self, width: int, classes: int) -> None:
        super().__init__()
        self.w_big = nn.Parameter(torch.randn(width, width) / width**0.5)
        self.w_head = nn.Parameter(torch.randn(width, classes) / width**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x @ self.w_big  # the big matmul: BIG_MATMUL_LINE
        h = torch.relu(h)
        return h @ self.w_head


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=None, help="default 4096 on CUDA, 64 on CPU")
    p.add_argument("--width", type=int, default=None, help="default 8192 on CUDA, 256 on CPU")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="parameters and inputs")
    args = p.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    batch = args.batch_size or (4096 if cuda else 64)
    width = args.width or (8192 if cuda else 256)
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    # Batches made on the device up front: no loader, no copies, so the step is the matmuls.
    batches = [(torch.randn(batch, width, device=device, dtype=dtype), torch.randint(0, 10, (batch,), device=device))
               for _ in range(4)]
    model = BigThenSmall(width, 10).to(device, dtype)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    step = 0
    while step < args.steps:
        for x, y in batches:
            loss = nn.functional.cross_entropy(model(x).float(), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step == args.steps:
                break
    if cuda:
        torch.cuda.synchronize()
        print(f"big_matmul: max_memory_allocated {torch.cuda.max_memory_allocated()} bytes", file=sys.stderr)
    print(f"big_matmul: {args.steps} steps, batch {batch}, width {width} on {device}")


if __name__ == "__main__":
    main()
