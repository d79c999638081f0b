"""Capture: run a program under the profiler with no code change, or drive the profiler from the
Python API and trainer callbacks; produce a trace and telemetry, never an analysis."""

from stepscope.capture.program import Outcome, Program
from stepscope.capture.runner import Captured, capture_program
from stepscope.capture.session import CaptureResult, CaptureSession
from stepscope.capture.window import WindowSpec

__all__ = ["CaptureResult", "CaptureSession", "Captured", "Outcome", "Program", "WindowSpec", "capture_program"]
