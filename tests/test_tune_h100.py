"""The tune of examples/cifar_resnet.py recorded on a real H100 (tests/data/gpu_h100/tune_cifar, round 4 of
tests/gpu/), read without a GPU: a stepscope.tune/1 document of an older stepscope still reads (fields are only
added), its figures against arithmetic on the file, and its terminal rendering at narrow widths."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepscope.model.tune import tune_from_json

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


@pytest.mark.parametrize("width", [80, 100])
def test_the_terminal_report_keeps_to_the_width_and_every_fix_id_whole(width: int) -> None:
    """The finding: the ladder was 120 columns wide at COLUMNS=100. Every line within the width, every fix the
    file names (tried, kept, not tried) on one line, and every rung's throughput from the file still shown."""
    import io

    from rich.console import Console

    from stepscope.report.tune import TuneTerminalRenderer

    tune = load()
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None).print(TuneTerminalRenderer().render(tune))
    lines = buffer.getvalue().splitlines()
    assert max(len(line) for line in lines) <= width
    ids = {fix for t in tune.trials for fix in t.tried} | set(tune.applied) | {n.id for n in tune.not_tried}
    assert len(ids) == 10  # dataloader_workers ... torch_compile, and uint8_transfer not tried
    text = "\n".join(lines)
    assert all(i in text for i in ids), sorted(i for i in ids if i not in text)
    assert all(f"{t.samples_per_s:,.1f}" in text for t in tune.trials)
