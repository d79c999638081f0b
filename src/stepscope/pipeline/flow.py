"""The one road from a source to a Report: read the traces, (replay the step), compute the facts, advise,
predict, assemble. Every verb, the Python API, the callbacks and tune's profiled child come through `analyze`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope.advice import advise
from stepscope.advice.context import Context
from stepscope.errors import StepscopeError
from stepscope.model import report as s
from stepscope.pipeline import assemble, sources
from stepscope.pipeline.batch import batch_of
from stepscope.pipeline.meter import measured
from stepscope.pipeline.options import AnalyzeOptions
from stepscope.pipeline.timeline import timeline_facts
from stepscope.predict import PredictRequest, predict
from stepscope.predict.host import host_speed
from stepscope.trace.load import read_trace
from stepscope.trace.model import Trace

# The capture's own unprofiled timings before the step meter (capture/overhead.py), which the meter supersedes.
CAPTURE_REFERENCES = ("host clock", "synchronized slices")

if TYPE_CHECKING:
    from stepscope.model.calibration import ProfilerCost


def analyze(source: sources.Source, options: AnalyzeOptions | None = None, **changes: Any) -> s.Report:
    """The Report of a source: trace files, rank folders, a run folder, globs or list files, or Traces read
    already; several are the ranks of one job. `changes`: fields of `options` to set (`batch_size=32`)."""
    options = sources.with_live_run((options or AnalyzeOptions()).replace(**changes))
    traces = sources.traces_given(source)
    if traces is not None:
        return one_report(traces[0], options) if len(traces) == 1 else _job(options, traces=traces)
    paths = sources.paths_given(source)
    files = sources.files_of(paths)
    if len(files) == 1:
        return one_report(files[0], sources.with_run_folder(paths, options))
    return _job(options, files=files)


def _job(options: AnalyzeOptions, *, traces: list[Trace] | None = None, files: list[Path] | None = None) -> s.Report:
    """Several ranks as one job: Traces read already, analysed in this process, or files, on the options' engine."""
    from stepscope.pipeline import ranks  # one trace loads none of this road (engines, process pools, reduction)

    if traces is not None:
        return ranks.analyze_traces(traces, options, one_report)
    return ranks.analyze_files(files or [], options, one_report)


def one_report(trace: str | Path | Trace, options: AnalyzeOptions) -> s.Report:
    """One trace's full Report (a path is read first)."""
    trace = trace if isinstance(trace, Trace) else read_trace(trace, progress=options.read_progress)
    found = measured(options.meter)
    meter = found[0] if found is not None else None
    # The meter's steps are the job's reference, unless the caller measured one otherwise (tune's windows).
    if found is not None and (options.reference is None or options.reference.method in CAPTURE_REFERENCES):
        options = options.replace(reference=found[1])
    timeline = timeline_facts(trace, options)
    facts = timeline.facts
    if options.on_facts is not None:
        options.on_facts(facts)
    replayed = timeline.deperturbed is not None and timeline.deperturbed.replayed
    # A run folder analysed again: its own run section tells the advice what the program had set (threads, cores,
    # workers, the model's settings), as it told the run's; the report's run section stays the live capture's alone.
    run, told = (assemble.with_reference(r, options.reference) if meter is not None else r
                 for r in (options.run, options.run or options.folder_run))
    advice = advise(facts, told, replayed=replayed, meter=meter)
    batch = batch_of(facts, options.batch_size)
    prediction, notes = None, ()
    if options.predict is not None:
        request, host_note = _with_host(options.predict, options.calibration)
        notes = (host_note,) if host_note else ()
        try:
            prediction = predict(facts, request, batch_size=batch.size, power_w=options.power_w,
                                 step_range=options.step_range,
                                 measured_step_ns=meter.step_us * 1e3 if meter is not None else None,
                                 recorded=Context(facts, told, replayed).recorded)
        except StepscopeError as exc:  # the analysis stands without it; say why there is none
            notes = (*notes, f"no prediction: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""))
    return assemble.report(facts, advice, options.replace(run=run), batch, prediction, notes, timeline, meter)


def _with_host(request: PredictRequest, calibration: ProfilerCost | None) -> tuple[PredictRequest, str | None]:
    """The request with the target host's speed from the two machines' calibrations, when the target's was given
    (--target-host) and --host-speed was not; and what the prediction assumed of the host."""
    if request.target_host is None or request.host_speed != 1.0:
        return request, None
    speed, how = host_speed(calibration, request.target_host)
    return (dataclasses.replace(request, host_speed=speed) if speed else request), f"prediction: {how}"
