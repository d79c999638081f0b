"""How much a run's headline step moves from run to run: the noise every comparison of it is judged on
(stepscope/stats.py defines it), computed once in the pipeline and carried by the Report and the Diff."""

from __future__ import annotations

from typing import Literal

import msgspec

NoiseBasis = Literal["meter steps", "reference steps", "recorded steps"]
DiffVerdict = Literal["faster", "slower", "within_noise", "inconclusive"]


class StepNoise(msgspec.Struct, kw_only=True, frozen=True):
    relative: float  # the relative standard error of the headline's mean step (stats.mean_noise)
    spread: float  # how far one step strays from the median, relative (stats.spread)
    steps: int  # the per-step figures it stands on
    basis: NoiseBasis  # the step meter's steps wherever the meter ran; else the unprofiled or recorded steps
