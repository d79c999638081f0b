"""Measure what this GPU achieves: one large GEMM per dtype and one device-to-device copy (seconds).

The datasheet gives peaks; what a real kernel reaches is lower. These figures are the "achievable" column
of the hardware table for the device they ran on, kept per device in the user's cache directory (see
stepscope.hardware.achievable). Run: `python -m stepscope.hardware.measure [--json F] [--no-save]`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from stepscope.errors import StepscopeError
from stepscope.hardware.achievable import save_achievable
from stepscope.user_output import write_user_output

GEMM_SIZE = 8192
DTYPES = ("float32", "tf32", "bfloat16", "float16")


def _time_cuda(fn: Any, repeats: int, torch: Any) -> float:
    """Median seconds of `fn()` over `repeats` runs, timed with CUDA events after three warm-ups."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]


def measure_gemm(dtype: str, n: int = GEMM_SIZE, repeats: int = 10) -> float:
    """Achieved FLOP/s of an n x n x n matrix product in `dtype` ('tf32': float32 with TF32 allowed)."""
    import torch

    torch_dtype = torch.float32 if dtype in ("float32", "tf32") else getattr(torch, dtype)
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        a = torch.randn(n, n, device="cuda", dtype=torch_dtype)
        b = torch.randn(n, n, device="cuda", dtype=torch_dtype)
        seconds = _time_cuda(lambda: a @ b, repeats, torch)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return 2.0 * n**3 / seconds


def measure_copy(nbytes: int = 2 << 30, repeats: int = 10) -> float:
    """Achieved device-memory bandwidth (bytes/s, read + write) of a device-to-device copy."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    seconds = _time_cuda(lambda: dst.copy_(src), repeats, torch)
    return 2.0 * nbytes / seconds


def measure() -> dict[str, Any]:
    """Every figure for device 0, with the device's name as torch reports it."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: nothing to measure")
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
        "measured_at": time.strftime("%Y-%m-%d"), "gemm_n": GEMM_SIZE, "flops_per_s": {}}
    for dtype in DTYPES:
        result["flops_per_s"][dtype] = measure_gemm(dtype)
    result["memory_bytes_per_s"] = measure_copy()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON ('-' for stdout)")
    p.add_argument("--no-save", action="store_true", help="do not keep the figures in the cache directory")
    args = p.parse_args(argv)
    try:
        result = measure()
    except RuntimeError as exc:
        print(f"stepscope: error: {exc}", file=sys.stderr)
        return 2
    said = sys.stderr if args.json == "-" else sys.stdout  # the JSON alone on stdout, whole
    for dtype, value in result["flops_per_s"].items():
        print(f"{result['device']}: {dtype:9s} GEMM {GEMM_SIZE}^3: {value / 1e12:7.1f} TFLOP/s", file=said)
    print(f"{result['device']}: device copy: {result['memory_bytes_per_s'] / 1e9:7.1f} GB/s (read + write)",
          file=said)
    try:
        if args.json == "-":
            sys.stdout.write(json.dumps(result, indent=1) + "\n")
        elif args.json is not None:
            write_user_output(args.json, json.dumps(result, indent=1).encode(), what="measurement")
        if not args.no_save:
            print(f"kept as the achievable figures of {result['device']} in {save_achievable(result)}", file=said)
    except StepscopeError as exc:
        print(f"stepscope: error: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
