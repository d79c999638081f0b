"""The pipeline: the one road from traces to a Report (flow.analyze), with its options as one typed object.

    from stepscope.pipeline import AnalyzeOptions, analyze
    report = analyze("trace.json.gz", AnalyzeOptions(batch_size=32))

`flow` reads and analyses, `sources` says what a source can be (a run folder adds its samples per step, its
reference and its calibration), `sections` and `usage` turn the Facts into the Report's parts, `assemble`
builds the Report once (`ranks`: a job of several ranks), frozen from then on. `meter_section` is what the step
meter says of a run on its own (a program that ended before any window gives no trace to analyse).
"""

from __future__ import annotations

from stepscope.pipeline.flow import analyze
from stepscope.pipeline.meter import meter_section
from stepscope.pipeline.options import AnalyzeOptions

__all__ = ["AnalyzeOptions", "analyze", "meter_section"]
