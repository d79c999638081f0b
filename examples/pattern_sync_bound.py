"""Pattern `sync_bound`: host-device syncs and small device-to-host copies in every step.

A deep MLP (16 layers, 32 parameter tensors) whose training loop logs the way many loops do:
`loss.item()`, a NaN check on a tensor, a `.item()` per parameter's gradient norm, accuracy from
`.cpu()` predictions, and `print(loss)` every 10 steps. On a GPU each of these lines (marked `# sync`)
blocks the host until the GPU has drained its queue, so the GPU idles while the host launches the
next piece: ~35 times a step. The layers are wide enough (2048 on CUDA) that the GPU, not the host's
launches, sets the pace between syncs, even on an H100. On a CPU there is no queue to drain, so the
pattern does not exist there; the script still runs.

    python examples/pattern_sync_bound.py              # on a GPU: cudaStreamSynchronize / DtoH dominate
    python examples/pattern_sync_bound.py --no-sync    # fix

Fix: `--no-sync` keeps the running loss, accuracy and gradient norms on the device and reads them
once at the end (or every N steps), so the host runs ahead of the GPU.
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
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--width", type=int, default=None, help="default: 2048 on CUDA, 256 on CPU")
    p.add_argument("--depth", type=int, default=16, help="hidden Linear+ReLU layers")
    p.add_argument("--no-sync", action="store_true", help="fix: keep the metrics on the device")
    args = p.parse_args()
    device = torch.device(args.device)
    width = args.width or (2048 if device.type == "cuda" else 256)

    torch.manual_seed(0)
    n = args.steps * args.batch_size
    data = TensorDataset(torch.randn(n, 128), torch.randint(0, 10, (n,)))
    # batch_size=None + a BatchSampler: one fancy-index per batch keeps loading cheap and out of the way
    sampler = BatchSampler(RandomSampler(data), args.batch_size, drop_last=True)
    loader = DataLoader(data, sampler=sampler, batch_size=None)
    hidden = [m for _ in range(args.depth) for m in (nn.Linear(width, width), nn.ReLU())]
    model = nn.Sequential(nn.Linear(128, width), nn.ReLU(), *hidden, nn.Linear(width, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    total_loss = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    grad_norms = torch.zeros(len(list(model.parameters())), device=device)
    t0, step = time.perf_counter(), 0
    for x, y in loader:
        target = y.to(device)
        logits = model(x.to(device))
        loss = nn.functional.cross_entropy(logits, target)
        optimizer.zero_grad()
        loss.backward()
        if args.no_sync:
            total_loss += loss.detach()
            correct += (logits.argmax(1) == target).sum()
            grad_norms += torch.stack([q.grad.norm() for q in model.parameters()])  # type: ignore[union-attr]
        else:
            if torch.isnan(loss):  # sync: a tensor used as a Python bool
                continue
            total_loss += loss.item()  # sync
            correct += (logits.argmax(1).cpu() == y).sum()  # sync: small DtoH copy
            for i, q in enumerate(model.parameters()):
                grad_norms[i] += q.grad.norm().item()  # type: ignore[union-attr]  # sync, once per tensor
            if step % 10 == 0:
                print(f"step {step} loss {loss}")  # sync: printing a device tensor
        optimizer.step()
        step += 1
        if step == 1:  # start the clock after the first step (allocator and kernel warm-up)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
    # One read at the end: the only sync the --no-sync loop needs.
    mean_loss, accuracy = total_loss.item() / step, correct.item() / (step * args.batch_size)
    elapsed, timed = time.perf_counter() - t0, max(step - 1, 1)
    print(f"pattern_sync_bound: {step} steps, loss {mean_loss:.3f}, accuracy {accuracy:.2f} on {device}: "
          f"{timed * args.batch_size / elapsed:.1f} samples/s ({1e3 * elapsed / timed:.1f} ms/step)")  # fmt: skip


if __name__ == "__main__":
    main()
