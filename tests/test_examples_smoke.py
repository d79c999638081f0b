"""Every example script runs on the CPU at its smallest settings, for exactly the steps asked, and its flags do
what they say (what each prints is checked against what the flags imply)."""

from __future__ import annotations

import os
import re
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
    "pattern_copy_bound": ["--batch-size", "4", "--image-size", "112"],
    "pattern_copy_bound-fixes": ["--batch-size", "4", "--image-size", "112", "--pin-memory", "--uint8"],
    "pattern_sync_bound": ["--batch-size", "8", "--width", "16"],
    "pattern_sync_bound-no-sync": ["--batch-size", "8", "--width", "16", "--no-sync"],
    "pattern_launch_bound": ["--depth", "4"],
    "pattern_cpu_compute_bound": ["--batch-size", "2", "--image-size", "8"],
    "pattern_cpu_compute_bound-on-device": ["--batch-size", "2", "--image-size", "8", "--on-device"],
    "pattern_gpu_compute_bound": ["--batch-size", "8", "--width", "16", "--depth", "2", "--tf32"],
    "gpt2_train": ["--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--block-size", "16", "--batch-size", "2",
                   "--vocab", "64"],
}
# What each case must print beyond its throughput line, and what it must not.
EXPECT: dict[str, list[str]] = {
    "cifar_resnet": ["batch 4, 16px on cpu"],
    "pattern_input_bound": ["workers 0", "DataLoader wait"],
    "pattern_input_bound-workers": ["workers 1"],
    # 4 x 3 x 112 x 112 pixels: 602,112 bytes as float32, a quarter of that (150,528) as uint8.
    "pattern_copy_bound": ["0.6 MB/batch"],
    "pattern_copy_bound-fixes": ["0.2 MB/batch"],
    "pattern_sync_bound": ["step 0 loss"],  # print(loss) every 10 steps: one of the sync points
    "pattern_launch_bound": ["depth 4"],
    "pattern_gpu_compute_bound": ["width 16, batch 8"],
    "gpt2_train": ["1 layers x 32, batch 2 x 16 on cpu"],
}
NOT_EXPECTED: dict[str, list[str]] = {"pattern_sync_bound-no-sync": ["step 0 loss"]}
THROUGHPUT = re.compile(r"([\d,.]+) samples/s")


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
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    if case.startswith("pattern_input_bound") and "--report-wait" in CASES[case]:
        last = result.stdout.strip().splitlines()[-2]  # the wait line comes after the throughput line
    assert last.startswith(f"{script.stem}: 3 steps"), result.stdout
    rate = THROUGHPUT.search(last)
    assert rate is not None and float(rate.group(1).replace(",", "")) > 0, last
    for text in EXPECT.get(case, []):
        assert text in result.stdout, (text, result.stdout)
    for text in NOT_EXPECTED.get(case, []):
        assert text not in result.stdout, (text, result.stdout)
