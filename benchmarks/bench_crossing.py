"""What a batch's crossing from a DataLoader worker costs per byte (advice/crossing.py's constants):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_crossing.py [--mb 32] [--rounds 12]

- in the worker: collating into fresh shared memory (what default_collate does in a worker: a new shared-memory
  file per batch, its pages faulted in as the stack writes them), beyond collating into the process's own memory;
  timed in this process, alternating the two, the same samples;
- in the main process: receiving the batch from a forked worker that is ahead (the file descriptor passed, the
  file mapped, the storage rebuilt) and its first read (the mapped pages faulted in), beyond reading a batch the
  process made itself; timed around `next()` and one `sum()` with the worker given time to be ready.

Prints the medians (ns per byte) with their spread; a shared machine moves them: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader, Dataset

ROW = 131072  # float32 per sample (512 KiB)


class Rows(Dataset):
    def __init__(self, rows: int) -> None:
        self.pool = torch.rand(rows, ROW)

    def __len__(self) -> int:
        return 10**6

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.pool[i % len(self.pool)]


def worker_side(samples: list[torch.Tensor], rounds: int) -> tuple[list[float], list[float]]:
    """ns of a stack into private memory, and into fresh shared memory (as in a worker), alternating."""
    plain, shared = [], []
    numel = sum(x.numel() for x in samples)
    for _ in range(rounds):
        t = time.perf_counter_ns()
        torch.stack(samples)
        plain.append(time.perf_counter_ns() - t)
        t = time.perf_counter_ns()
        storage = samples[0]._typed_storage()._new_shared(numel, device=samples[0].device)
        out = samples[0].new(storage).resize_(len(samples), *samples[0].shape)
        torch.stack(samples, out=out)
        shared.append(time.perf_counter_ns() - t)
        del out, storage
    return plain, shared


def main_side(rows: int, rounds: int) -> tuple[list[float], list[float]]:
    """ns of reading a batch made here, and of receiving and reading one from a worker that is ahead."""
    data = Rows(rows)
    own, crossed = [], []
    loader = DataLoader(data, batch_size=rows, num_workers=1, persistent_workers=True,
                        multiprocessing_context="fork", prefetch_factor=2)
    it = iter(loader)
    next(it)
    for _ in range(rounds):
        batch = torch.stack([data[i] for i in range(rows)])
        t = time.perf_counter_ns()
        float(batch.sum())
        own.append(time.perf_counter_ns() - t)
        del batch
        time.sleep(0.3)  # the worker has the next batch ready: what is timed is the crossing, not the loading
        t = time.perf_counter_ns()
        crossed_batch = next(it)
        float(crossed_batch.sum())
        del crossed_batch
        crossed.append(time.perf_counter_ns() - t)
    return own, crossed


def per_byte(base: list[float], more: list[float], nbytes: int) -> tuple[float, float, float]:
    diffs = sorted((m - b) / nbytes for b, m in zip(base, more, strict=True))
    return statistics.median(diffs), diffs[len(diffs) // 4], diffs[(3 * len(diffs)) // 4]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=32, help="batch size in MiB (multiples of 0.5)")
    p.add_argument("--rounds", type=int, default=12)
    args = p.parse_args()
    torch.set_num_threads(1)
    rows = max(1, args.mb * 2)
    nbytes = rows * ROW * 4
    samples = [x for x in Rows(rows).pool]
    plain, shared = worker_side(samples, args.rounds)
    own, crossed = main_side(rows, args.rounds)
    for name, (base, more) in {"worker (collate into shared memory)": (plain, shared),
                               "main (receive + rebuild + first read)": (own, crossed)}.items():
        med, lo, hi = per_byte(base, more, nbytes)
        print(f"{name}: {med:.3f} ns/byte beyond its own memory (quartiles {lo:.3f}-{hi:.3f}); "
              f"{statistics.median(base) / 1e6:.1f} -> {statistics.median(more) / 1e6:.1f} ms for {nbytes >> 20} MiB")


if __name__ == "__main__":
    main()
