"""The step meter: every step measured unprofiled, its phases, the workers' batches (see meter.py)."""

from stepscope.capture.meter.meter import StepMeter

__all__ = ["StepMeter"]
