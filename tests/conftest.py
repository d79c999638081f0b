"""Shared fixtures: the real traces beside the project, and a builder of synthetic ones."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

SHARED = Path(__file__).resolve().parents[2] / "shared"
KINETO = SHARED / "traces" / "kineto"
NSYS = SHARED / "traces" / "nsys"


def kineto_trace(name: str) -> Path:
    path = KINETO / name
    if not path.exists():
        pytest.skip(f"shared trace {path} is not available")
    return path


@pytest.fixture
def builder():
    from builder import TraceBuilder

    return TraceBuilder()
