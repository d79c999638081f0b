"""stepscope: find out why a PyTorch job is slow, which fix to apply, and where."""

from __future__ import annotations

__version__ = "0.1.0"

from stepscope.api import profile, step
from stepscope.errors import StepscopeError
from stepscope.pipeline import analyze, analyze_traces
from stepscope.report.schema import Report

__all__ = ["Report", "StepscopeError", "__version__", "analyze", "analyze_traces", "profile", "step"]
