"""The model's measured error, shipped with stepscope: what its predictions came to against GPU pairs measured on
real hardware (data/validation.json, written by benchmarks/predict_validation.py from tests/data; a test
recomputes it). The prediction's interval comes from here, never from a guess."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

# The package's own folder, not importlib.resources: that loads tempfile, shutil, bz2 and lzma at import
# (hardware/table.py reads its files the same way).
DATA = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class MeasuredError:
    """The prediction model's error as measured on real GPU pairs."""

    gpu_time_error: float  # the largest |predicted / measured - 1| of GPU time per step over the pairs
    pairs: frozenset[frozenset[str]]  # the GPU pairs (table ids) it was measured on
    workloads: int
    doc: dict[str, Any]

    def validated(self, origin: str, target: str) -> bool:
        return origin == target or frozenset((origin, target)) in self.pairs


@lru_cache(maxsize=1)
def measured_error() -> MeasuredError:
    doc = json.loads((DATA / "validation.json").read_text())
    rows = doc["pairs"]
    pairs = frozenset(frozenset((r["origin"], r["target"])) for r in rows)
    return MeasuredError(gpu_time_error=float(doc["summary"]["gpu_time_error_max"]), pairs=pairs,
                         workloads=len({r["workload"] for r in rows}), doc=doc)
