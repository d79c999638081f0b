"""What an analysis is asked for, as one typed object: the verbs, the API, the callbacks and tune's child each
fill one in and hand it to `pipeline.analyze`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stepscope.analysis.facts import Facts
    from stepscope.model.calibration import ProfilerCost
    from stepscope.model.meter import MeterRecord
    from stepscope.model.report import Recommendation, Reference, Run
    from stepscope.predict import PredictRequest
    from stepscope.ranks.driver import Progress
    from stepscope.ranks.engines import Engine
    from stepscope.trace.model import Trace


@dataclass(frozen=True)
class AnalyzeOptions:
    """Everything an analysis is asked for."""

    step_range: str | None = None  # the range (NVTX or record_function) that marks one step
    batch_size: int | None = None  # samples per step, for samples/s (else a run folder's own, when there is one)
    predict: PredictRequest | None = None  # also the job on other GPUs: the report's `prediction` section
    power_w: float | None = None  # the origin GPU's mean power (telemetry), for the prediction's energy per step
    engine: Engine | None = None  # where many rank files are summarised (default: a local process pool)
    progress: Progress | None = None  # told (done, total) as the rank files are summarised
    # A live capture (`stepscope run`, the API, the callbacks, tune's profiled child): how it went (the report's
    # run section, whose settings and reference the advice reads) and what the capture said (first notes).
    run: Run | None = None
    capture_notes: tuple[str, ...] = ()
    # A run folder's own run section (analyze RUN_FOLDER): the advice reads its settings and reference as the run's
    # did; the report has no run section of its own (that is the live capture's alone).
    folder_run: Run | None = None
    # What the replay takes (stepscope.replay): the unprofiled step timings of the run, the profiler's cost per
    # event on the capturing machine (the run folder's calibration.json) and the timing pass's trace (timing.json.gz,
    # recorded with minimal settings before the recorded pass: the steps' timeline comes from it).
    reference: Reference | None = None
    calibration: ProfilerCost | None = None
    timing: str | Path | Trace | None = None
    # The step meter's record (a live capture's, or a run folder's meter.json): the headline and the phases stand on
    # it, the profile explains what happens inside them (pipeline/meter.py).
    meter: MeterRecord | None = None
    # Told how a one-file read goes (bytes read, total), for a progress bar on big traces (trace/load.read_trace).
    read_progress: Callable[[int, int], None] | None = None
    # Recommendations already acted on (tune's final diagnosis: the fixes its ladder applied or measured as no
    # gain): given each, None keeps it; a text leaves it out of the Report, said in a note unless the text is empty.
    settled: Callable[[Recommendation], str | None] | None = None
    # Handed the Facts of a one-trace analysis: for outputs that read the trace again (the annotated trace).
    on_facts: Callable[[Facts], None] | None = None

    def replace(self, **changes: Any) -> AnalyzeOptions:
        """These options with some fields changed; an unknown name is a TypeError."""
        return dataclasses.replace(self, **changes) if changes else self

    def for_task(self, main: bool) -> AnalyzeOptions:
        """What a per-rank task on an engine is given: nothing that cannot travel to another process (the engine,
        the progress bar, the facts hook), and a prediction and run section for the main rank only."""
        return self.replace(engine=None, progress=None, on_facts=None, read_progress=None, settled=None,
                            predict=self.predict if main else None,
                        run=self.run if main else None, capture_notes=self.capture_notes if main else (),
                        timing=self.timing if main else None, meter=self.meter if main else None)
