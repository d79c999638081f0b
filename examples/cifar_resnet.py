"""ResNet-18 trained with SGD on a fake CIFAR-10 resized to 224 px: the published walk-through workload.

The PyTorch-profiler walk-through trains torchvision's ResNet-18 on CIFAR-10 images upscaled to
224x224, batch 32, and removes one bottleneck at a time. This script reproduces it without
torchvision or a download: the model is ResNet-18 in plain torch (BasicBlock, stages [2, 2, 2, 2])
with the ImageNet-style stem (7x7 stride-2 conv + max-pool), as torchvision's `resnet18` has, and the
data are 10,000 seeded random uint8 32x32x3 images with random labels, resized and normalised per
item in `__getitem__` the way `transforms.Resize` + `ToTensor` + `Normalize` would do it.

Each step of the optimisation sequence is one flag, so each run is one rung of the ladder:

    python examples/cifar_resnet.py                       # baseline: input-bound (workers 0)
    python examples/cifar_resnet.py --workers 4           # + DataLoader workers
    python examples/cifar_resnet.py --workers 4 --pin-memory          # + pinned, async H2D copies
    python examples/cifar_resnet.py --workers 4 --pin-memory --uint8  # + send uint8, normalise on device
    ... --set-to-none --amp --compile --batch-size 128    # + cheaper zero_grad, AMP, compile, bigger batch

`--image-size` defaults to 224 on CUDA and to 32 on a CPU, where a 224 px step takes ~30 s on 2 cores;
`python examples/cifar_resnet.py --image-size 32 --steps 12` takes ~10-20 s on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

# CIFAR-10 channel statistics, as used by the usual `transforms.Normalize`.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


class FakeCifar10(Dataset):
    """Seeded random uint8 images (N, 32, 32, 3) and labels; resized and normalised per item."""

    def __init__(self, num_images: int, image_size: int, uint8: bool, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        # One tensor made at construction: cheap, deterministic, and pickles once per worker.
        self.images = torch.randint(0, 256, (num_images, 32, 32, 3), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, 10, (num_images,), generator=g)
        self.image_size = image_size
        self.uint8 = uint8
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = self.images[i].permute(2, 0, 1).float().unsqueeze(0)  # HWC uint8 -> 1CHW float
        if self.image_size != img.shape[-1]:
            size = (self.image_size, self.image_size)
            img = F.interpolate(img, size=size, mode="bilinear", align_corners=False)
        img = img.squeeze(0)
        if self.uint8:  # a quarter of the bytes to collate and copy; normalised on the device
            return img.round_().clamp_(0, 255).to(torch.uint8), self.labels[i]
        return (img / 255.0 - self.mean) / self.std, self.labels[i]


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        # ImageNet-style stem, as torchvision.models.resnet18 (the walk-through's model).
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        layers: list[nn.Module] = []
        cin = 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps to run in total")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=None, help="default: 224 on CUDA, 32 on CPU")
    p.add_argument("--num-images", type=int, default=10_000)
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    p.add_argument("--pin-memory", action="store_true", help="pin_memory=True and non_blocking copies")
    p.add_argument("--uint8", action="store_true", help="load uint8, convert and normalise on the device")
    p.add_argument("--set-to-none", action="store_true", help="zero_grad(set_to_none=True)")
    p.add_argument("--amp", action="store_true", help="autocast: bf16 on CPU, fp16 + GradScaler on CUDA")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    if args.image_size is None:  # 224 px is the walk-through; on a CPU one step would take ~30 s
        args.image_size = 224 if device.type == "cuda" else 32
    torch.manual_seed(0)
    dataset = FakeCifar10(args.num_images, args.image_size, args.uint8)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=args.workers,
        pin_memory=args.pin_memory and device.type == "cuda",  # nothing to pin for a CPU target
    )
    model: nn.Module = ResNet18().to(device)
    if args.compile:
        model = torch.compile(model)  # type: ignore[assignment]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    use_scaler = args.amp and device.type == "cuda"
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda", enabled=use_scaler)
    # uint8 batches are normalised here, on the device, where it is one cheap fused pass.
    mean255 = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std255 = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255
    model.train()

    step, t0 = 0, time.perf_counter()
    while step < args.steps:  # as many epochs as the step count needs
        for images, labels in loader:
            images = images.to(device, non_blocking=args.pin_memory)
            labels = labels.to(device, non_blocking=args.pin_memory)
            if args.uint8:
                images = (images.float() - mean255) / std255
            with torch.autocast(device.type, dtype=amp_dtype, enabled=args.amp):
                loss = criterion(model(images), labels)
            optimizer.zero_grad(set_to_none=args.set_to_none)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            step += 1
            if step == 1:  # start the clock after the first step: worker start-up, compile, allocator
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
            if step == args.steps:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    timed = max(args.steps - 1, 1)
    print(
        f"cifar_resnet: {args.steps} steps, batch {args.batch_size}, {args.image_size}px on {device}: "
        f"{timed * args.batch_size / elapsed:.1f} samples/s ({1e3 * elapsed / timed:.1f} ms/step)"
    )


if __name__ == "__main__":
    main()
