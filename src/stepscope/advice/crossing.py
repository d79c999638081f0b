"""What a batch costs to cross from a DataLoader worker to the main process, from its bytes.

A batch a worker makes is collated into a fresh shared-memory file (default_collate in a worker: a new file per
batch, its pages faulted in as the stack writes them) instead of the process's own memory; the main process
receives the file's descriptor, maps it, rebuilds the tensors, and its first read of the batch faults the mapped
pages in. Loading in the main process pays neither. Both grow with the batch's bytes: small batches (images of a
few hundred KB) cross for next to nothing, a 32 MB batch for tens of milliseconds on each side.

The costs per byte are measured by `benchmarks/bench_crossing.py` (each side against the same work in the process's
own memory, alternating, medians of 10 rounds): on this project's 2-core Xeon (AVX-512, AMX), shared with other
jobs, 32 MiB batches, 2026-12: the worker 0.78 ns/byte more (quartiles 0.49-1.04), the main process 0.76 ns/byte
(0.05-1.15); 8 MiB batches read 1.6 and 1.4 ns/byte. A quiet machine may read lower: rerun it there.
"""

from __future__ import annotations

# ns per byte of a batch, beyond the same batch made in the main process (see above)
WORKER_NS_PER_BYTE = 0.78  # the worker's collate into fresh shared memory
MAIN_NS_PER_BYTE = 0.76  # the main process: descriptor received, mapped, rebuilt, first read


def crossing_us(batch_bytes: int | None) -> tuple[float, float]:
    """(µs in the main process, µs more in the worker) a batch of `batch_bytes` costs crossing from a worker;
    (0, 0) where its bytes are not known."""
    if not batch_bytes:
        return 0.0, 0.0
    return batch_bytes * MAIN_NS_PER_BYTE / 1e3, batch_bytes * WORKER_NS_PER_BYTE / 1e3
