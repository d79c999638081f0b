"""The tune of examples/cifar_resnet.py recorded on a real H100 (tests/data/gpu_h100/tune_cifar, round 4 of
tests/gpu/), read without a GPU: its figures against arithmetic on the file, and the baseline drift re-read."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepscope.model.tune import tune_from_json
from stepscope.tune.review import _reread

TUNE = Path(__file__).parent / "data" / "gpu_h100" / "tune_cifar" / "tune.json"


def load():
    return tune_from_json(TUNE.read_bytes())


def test_each_rung_speedup_is_its_throughput_over_the_baseline() -> None:
    tune = load()
    assert tune.device is not None and tune.device.name == "NVIDIA H100 80GB HBM3"
    base = tune.baseline.samples_per_s
    for t in tune.trials:
        assert t.speedup == pytest.approx(t.samples_per_s / base, rel=2e-3)
    # The ladder as it ran, each rung on the one before: 1,305 -> 7,139 samples/s.
    assert tune.trials[-1].samples_per_s / base == pytest.approx(5.47, abs=0.01)


def test_drift_spread_over_the_tune_keeps_gains_measured_one_run_apart() -> None:
    """The baseline moved 41% between its first run and its last, 12 runs later. Charged whole to every rung,
    that dropped pin_memory (1.25x) and set_to_none (1.18x), each measured one run after the rung it was
    compared with; spread over the runs, one run is exposed to 41% / 12 = 3.4%."""
    tune = load()
    assert tune.baseline.drift == pytest.approx(0.4094)
    for t in tune.trials:  # undo the whole-drift re-read the file was written with
        if "baseline itself moved" in t.reason:
            t.accepted, t.reason = True, "faster"

    class Pooled:
        median_ns = tune.baseline.step_time_us * 1e3

    _reread(tune.trials, Pooled(), tune.baseline.batch_size, tune.baseline.drift)
    kept = {t.rung for t in tune.trials if t.accepted}
    by_rung = {t.rung: t for t in tune.trials}
    assert by_rung[4].tried == ["pin_memory", "non_blocking_copy"] and by_rung[5].tried == ["set_to_none"]
    assert {3, 4, 5, 10, 11} <= kept and not {6, 7, 8} & kept  # cudnn_benchmark, amp, channels_last never were
