"""stepscope: find out why a PyTorch job is slow, which fix to apply, and where."""

from __future__ import annotations

__version__ = "0.1.0"

from stepscope.errors import StepscopeError
from stepscope.pipeline import analyze, analyze_traces
from stepscope.report.schema import Report


def __getattr__(name: str) -> object:
    """`stepscope.profile` and `stepscope.step` load the capture machinery only when first used."""
    if name in ("profile", "step"):
        from stepscope import api

        return getattr(api, name)
    raise AttributeError(f"module 'stepscope' has no attribute {name!r}")


__all__ = ["Report", "StepscopeError", "__version__", "analyze", "analyze_traces", "profile", "step"]
