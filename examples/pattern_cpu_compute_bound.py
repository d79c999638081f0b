"""Pattern `cpu_compute_bound`: per-sample numpy post-processing on the host every step.

A tiny segmentation net (21 classes) whose training loop computes its metrics the way many do: copy
the probabilities to the host, then for each sample, in numpy, take the argmax map, update a
confusion matrix, histogram the confidences and loop over the classes for IoU and boxes. The model's
work is small, so on a GPU the device idles while one host core crunches numbers; on a CPU the numpy
work is most of the step too.

    python examples/pattern_cpu_compute_bound.py               # host numpy dominates
    python examples/pattern_cpu_compute_bound.py --on-device   # fix

Fix: `--on-device` updates the confusion matrix (per-class IoU follows from it at the end) and the
histogram for the whole batch at once with torch ops on the device (scatter_add_: no host copy, no
sync) and drops the per-sample boxes; other fixes are vectorising the numpy, computing metrics every
N steps, or computing them in a background thread or process.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

CLASSES, BINS = 21, 15


def host_metrics(probs: np.ndarray, target: np.ndarray, confusion: np.ndarray, hist: np.ndarray) -> None:
    """The slow way: per sample and per class, in numpy, on the host."""
    for k in range(len(probs)):
        pred = probs[k].argmax(0)
        confusion += np.bincount(target[k].ravel() * CLASSES + pred.ravel(), minlength=CLASSES**2).reshape(
            CLASSES, CLASSES
        )
        hist += np.histogram(probs[k].max(0), bins=BINS, range=(0.0, 1.0))[0]
        for c in range(CLASSES):  # per-class IoU and bounding box of this sample, for logging
            mask, truth = pred == c, target[k] == c
            union = np.logical_or(mask, truth).sum()
            _ = np.logical_and(mask, truth).sum() / union if union else float("nan")
            ys, xs = np.nonzero(mask)
            _ = (ys.min(), xs.min(), ys.max(), xs.max()) if len(ys) else None


def device_metrics(logits: torch.Tensor, target: torch.Tensor, confusion: torch.Tensor, hist: torch.Tensor) -> None:
    """The fix: the whole batch at once, on the device; scatter_add_ (unlike bincount) needs no sync."""
    probs = logits.detach().softmax(1)
    pred = probs.argmax(1)
    confusion.view(-1).scatter_add_(0, (target * CLASSES + pred).flatten(), torch.ones_like(pred).flatten())
    bins = (probs.amax(1) * BINS).long().clamp_(max=BINS - 1).flatten()
    hist.scatter_add_(0, bins, torch.ones_like(bins))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps to run in total")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--on-device", action="store_true", help="fix: batched metrics on the device")
    args = p.parse_args()
    device = torch.device(args.device)

    torch.manual_seed(0)
    n, s = args.steps * args.batch_size, args.image_size
    data = TensorDataset(torch.randn(n, 3, s, s), torch.randint(0, CLASSES, (n, s, s)))
    # batch_size=None + a BatchSampler: one fancy-index per batch keeps loading cheap and out of the way
    sampler = BatchSampler(RandomSampler(data), args.batch_size, drop_last=True)
    loader = DataLoader(data, sampler=sampler, batch_size=None)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, CLASSES, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    confusion_np = np.zeros((CLASSES, CLASSES), dtype=np.int64)
    hist_np = np.zeros(BINS, dtype=np.int64)
    confusion = torch.zeros(CLASSES, CLASSES, dtype=torch.long, device=device)
    hist = torch.zeros(BINS, dtype=torch.long, device=device)

    t0, step = time.perf_counter(), 0
    for images, target in loader:
        target = target.to(device)
        logits = model(images.to(device))
        loss = nn.functional.cross_entropy(logits, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.on_device:
            device_metrics(logits, target, confusion, hist)
        else:
            probs = logits.detach().softmax(1).cpu().numpy()
            host_metrics(probs, target.cpu().numpy(), confusion_np, hist_np)
        step += 1
        if step == 1:  # start the clock after the first step (allocator and kernel warm-up)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
    cm = confusion.cpu().numpy() if args.on_device else confusion_np
    elapsed, timed = time.perf_counter() - t0, max(step - 1, 1)
    print(f"pattern_cpu_compute_bound: {step} steps, pixel accuracy {np.trace(cm) / cm.sum():.3f} on {device}: "
          f"{timed * args.batch_size / elapsed:.1f} samples/s ({1e3 * elapsed / timed:.1f} ms/step)")  # fmt: skip


if __name__ == "__main__":
    main()
