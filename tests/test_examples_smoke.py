"""Smoke test: every example script runs to completion on the CPU at its smallest settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
COMMON = ["--device", "cpu", "--steps", "3"]
TINY_CIFAR = ["--image-size", "16", "--batch-size", "4", "--num-images", "64"]

# Name: arguments. The script is the name up to the first "-"; the rest says which fix flags it adds.
CASES: dict[str, list[str]] = {
    "cifar_resnet": TINY_CIFAR,
    "cifar_resnet-fixes": [*TINY_CIFAR, "--workers", "1", "--pin-memory", "--uint8", "--set-to-none", "--amp"],
    "pattern_input_bound": ["--batch-size", "4", "--image-size", "16", "--work", "1", "--report-wait"],
    "pattern_input_bound-workers": ["--batch-size", "4", "--image-size", "16", "--work", "1", "--workers", "1"],
    "pattern_copy_bound": ["--batch-size", "4", "--image-size", "32"],
    "pattern_copy_bound-fixes": ["--batch-size", "4", "--image-size", "32", "--pin-memory", "--uint8"],
    "pattern_sync_bound": ["--batch-size", "8", "--width", "16"],
    "pattern_sync_bound-no-sync": ["--batch-size", "8", "--width", "16", "--no-sync"],
    "pattern_launch_bound": ["--depth", "4"],
    "pattern_cpu_compute_bound": ["--batch-size", "2", "--image-size", "8"],
    "pattern_cpu_compute_bound-on-device": ["--batch-size", "2", "--image-size", "8", "--on-device"],
    "pattern_gpu_compute_bound": ["--batch-size", "8", "--width", "16", "--depth", "2", "--tf32"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_example_runs(case: str) -> None:
    script = EXAMPLES / f"{case.split('-')[0]}.py"
    # One thread: the scripts are tiny here, and OpenMP threads crawl when tests share the cores.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(script), *COMMON, *CASES[case]],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip(), "the example printed nothing"
