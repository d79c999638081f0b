"""The published PyTorch-profiler walk-through's training loop, as written: PIL transforms, torchvision's ResNet-18.

The walk-through trains torchvision's `resnet18` on CIFAR-10 upscaled to 224 px through
`transforms.Compose([Resize(224), ToTensor(), Normalize(...)])`, batch 32, SGD, no DataLoader workers, and
takes it from ~400 to 3,268 samples/s on a V100 in seven steps. Here the CIFAR-10 images are 10,000 seeded
random uint8 32x32x3 arrays served as PIL images (no download), everything else as published. With no flag
this is the original loop; each flag is one of the seven steps, for measuring the ladder by hand:

    python examples/walkthrough_resnet18.py                       # as published (input-bound)
    ... --workers 8 --pin-memory --batch-size 256 --uint8 --set-to-none --amp     # the steps, in order

Needs torchvision (stepscope itself does not); `examples/cifar_resnet.py` is the same job without it.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


class RandomCifar10(Dataset):
    """CIFAR-10's shape and types: (PIL image, int label); random pixels, seeded."""

    def __init__(self, transform, n: int = 10_000) -> None:  # type: ignore[no-untyped-def]
        rng = np.random.default_rng(0)
        self.data = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        self.targets = rng.integers(0, 10, n).tolist()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int):  # type: ignore[no-untyped-def]
        return self.transform(Image.fromarray(self.data[i])), self.targets[i]


class ToUint8Tensor:
    """PIL image -> uint8 CHW tensor: what ToTensor does, without the float conversion and the division."""

    def __call__(self, img):  # type: ignore[no-untyped-def]
        return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1)


def main() -> None:
    import torchvision
    import torchvision.transforms as T

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=60, help="optimizer steps to run in total")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--pin-memory", action="store_true", help="pin_memory=True and non_blocking copies")
    p.add_argument("--uint8", action="store_true", help="send uint8, convert and normalise on the device")
    p.add_argument("--set-to-none", action="store_true", help="zero_grad(set_to_none=True)")
    p.add_argument("--amp", action="store_true", help="bf16 autocast")
    args = p.parse_args()
    device = torch.device(args.device)

    if args.uint8:
        transform = T.Compose([T.Resize(224), ToUint8Tensor()])
    else:
        transform = T.Compose([T.Resize(224), T.ToTensor(), T.Normalize(MEAN, STD)])
    train_set = RandomCifar10(transform)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                              pin_memory=args.pin_memory)
    model = torchvision.models.resnet18(weights=None).to(device)  # random weights: no download
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255
    model.train()

    step, t0 = 0, time.perf_counter()
    while step < args.steps:
        for inputs, labels in train_loader:
            inputs = inputs.to(device=device, non_blocking=args.pin_memory)
            labels = labels.to(device=device, non_blocking=args.pin_memory)
            if args.uint8:
                inputs = (inputs.float() - mean) / std
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp):
                outputs = model(inputs)
                loss = criterion(outputs, labels)
            optimizer.zero_grad(set_to_none=args.set_to_none)
            loss.backward()
            optimizer.step()
            step += 1
            if step == 5:  # start the clock after worker start-up and the first kernels
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
            if step >= args.steps:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    timed = max(step - 5, 1)
    elapsed = time.perf_counter() - t0
    print(f"walkthrough_resnet18: {step} steps, batch {args.batch_size}, workers {args.workers} on {device}: "
          f"{timed * args.batch_size / elapsed:.1f} samples/s ({1e3 * elapsed / timed:.1f} ms/step)")


if __name__ == "__main__":
    main()
