"""The tune ladder in the terminal has the same columns in every tune printed at one width: which columns give way
depends on the width alone, never on what the rungs hold (two tunes at 80 columns printed different columns)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from stepscope.model.tune import tune_from_json
from stepscope.report.tune import ladder_rich
from test_tune_report import sample_tune

H100_TUNE = Path(__file__).parent / "data" / "gpu_h100" / "tune_cifar" / "tune.json"


def header(tune: object, width: int) -> list[str]:
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None).print(ladder_rich(tune))  # type: ignore[arg-type]
    lines = buffer.getvalue().splitlines()
    assert max(len(line) for line in lines) <= width
    return re.split(r"\s{2,}", next(line for line in lines if line.strip().startswith("rung")).strip())


@pytest.mark.parametrize("width", [80, 100, 140])
def test_every_tune_has_the_same_ladder_columns_at_one_width(width: int) -> None:
    real, sample = tune_from_json(H100_TUNE.read_bytes()), sample_tune()
    assert header(real, width) == header(sample, width)
    # What a reader decides by stays at every width: the fix, the throughput, the speed-up, kept or not, and why.
    assert {"fix", "vs baseline", "kept", "why"} <= set(header(real, width))
