"""What autocast's fp32 -> bf16 casts move per second on one core (advice/cpu_precision.CAST_BYTES_PER_S):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_casts.py

`x.to(torch.bfloat16)` of fresh fp32 tensors of 1 to 16 MB (read 4 bytes, write 2 an element), medians of 15.
Prints GB/s (read + write) per size; a shared machine moves them: run it on a quiet one.
"""

from __future__ import annotations

import statistics
import time

import torch


def main() -> None:
    torch.set_num_threads(1)
    for mb in (1, 4, 16):
        x = torch.rand(mb * 2**18)  # mb MiB of fp32
        times = []
        for _ in range(15):
            t = time.perf_counter_ns()
            x.to(torch.bfloat16)
            times.append(time.perf_counter_ns() - t)
        moved = x.numel() * 6
        print(f"{mb:3d} MiB fp32 -> bf16: {moved / statistics.median(times):.2f} GB/s (read + write)")


if __name__ == "__main__":
    main()
