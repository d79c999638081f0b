"""Tiny training scripts for the live tests (a few ms per step on a CPU), and process-tree helpers."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

# The first layer's width is what the tests change: WIDTH 64 -> 16384 makes line 15 (the forward) ~50x slower, far
# beyond what a loaded machine adds to the narrow one (CI on 2 busy cores once read a 4096-wide forward, 640 µs, as
# no change).
TRAIN = """\
import argparse
import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=16)
args = p.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)
WIDTH = 64
model = nn.Sequential(nn.Linear(256, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(args.batch_size, 256), torch.randint(0, 10, (args.batch_size,))
for step in range(40):
    out = model(x)
    loss = nn.functional.cross_entropy(out, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
FORWARD_LINE = 15  # `out = model(x)`
WIDE = TRAIN.replace("WIDTH = 64", "WIDTH = 16384")
# The two-layer net the editor and notebook tests widen (HIDDEN): its source, after `import torch`.
NET_CLASS = """\
class Net(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = torch.nn.Linear(128, hidden)
        self.fc2 = torch.nn.Linear(hidden, 4)
    def forward(self, x):
        h = self.fc1(x).relu()
        return self.fc2(h)
"""
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def write_script(folder: Path, text: str = TRAIN, name: str = "train.py") -> Path:
    path = folder / name
    path.write_text(text)
    assert path.read_text().splitlines()[FORWARD_LINE - 1].strip() == "out = model(x)"
    return path


def wait_for(check: Callable[[], object], timeout: float, what: str, every: float = 0.1) -> object:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def descendants(pid: int, besides: frozenset[int] = frozenset()) -> list:  # type: ignore[type-arg]
    """The process's children, grandchildren, ...; less those in `besides` (a test process's own, made before the
    test by other tests in it: a process pool's forkserver, multiprocessing's resource tracker)."""
    import psutil

    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if p.pid not in besides]
    except psutil.NoSuchProcess:
        return []


def alive(procs: list) -> list:  # type: ignore[type-arg]
    return [p for p in procs if p.is_running() and p.status() != "zombie"]
