"""The headline's noise (model/noise.py), once per Report by the pipeline, or by diff for a report written without
it: from the step meter's steps wherever the meter ran (the job unprofiled, every step), else the run's other
unprofiled steps, else the steps the trace recorded."""

from __future__ import annotations

from collections.abc import Sequence

from stepscope.model.noise import NoiseBasis, StepNoise
from stepscope.model.run import Reference
from stepscope.stats import mean_noise, spread


def headline_noise(reference: Reference | None, recorded_us: Sequence[float]) -> StepNoise | None:
    """None under stats.MIN_STEPS figures: a one-step capture has no noise to judge a change by."""
    basis: NoiseBasis
    if reference is not None and reference.values_us:
        basis = "meter steps" if reference.method == "step meter" else "reference steps"
        values: Sequence[float] = reference.values_us
    else:
        basis, values = "recorded steps", recorded_us
    relative = mean_noise(values)
    if relative is None:
        return None
    return StepNoise(relative=round(relative, 4), spread=round(spread(values), 4), steps=len(values), basis=basis)
