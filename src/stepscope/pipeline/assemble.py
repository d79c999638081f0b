"""The one module that builds a Report: from the parts the analyses give (pipeline/sections.py, usage.py), the
patterns and recommendations the advice returns, the prediction, and a live capture's run section. A Report is
frozen once built; a job of several ranks is the main rank's Report with the cross-rank parts, built here too."""

from __future__ import annotations

import msgspec

from stepscope.advice import Advice
from stepscope.analysis.facts import Facts
from stepscope.model import report as s
from stepscope.pipeline import sections
from stepscope.pipeline.options import AnalyzeOptions
from stepscope.pipeline.usage import memory_section, utilization_section
from stepscope.predict.energy import origin_energy
from stepscope.ranks.to_report import JobParts
from stepscope.version import __version__

GENERATOR = f"stepscope {__version__}"


def report(facts: Facts, advice: Advice, options: AnalyzeOptions, prediction: s.Prediction | None = None,
           prediction_notes: tuple[str, ...] = ()) -> s.Report:
    """One trace's Report. Notes: the capture's, the trace's, how the verdict was taken, then the prediction's."""
    trace = facts.trace
    summary = sections.summary(facts, options.batch_size)
    devices = sections.devices(trace)
    return s.Report(
        generator=GENERATOR,
        source=s.Source(paths=[trace.meta.path], format=trace.meta.format),
        device=devices[0] if devices else None,
        devices=devices,
        accelerator=trace.meta.accelerator,
        rank=trace.meta.rank,
        world_size=trace.meta.world_size,
        steps=sections.step_rows(facts),
        summary=summary,
        gpu=sections.gpu(facts),
        kernels=sections.kernels(facts),
        syncs=sections.syncs(facts),
        copies=sections.copies(facts),
        memory=sections.memory(facts),
        patterns=advice.patterns,
        recommendations=advice.recommendations,
        notes=[*options.capture_notes, *trace.meta.notes, *advice.notes, *prediction_notes],
        lines=sections.lines(facts),
        modules=sections.modules(facts),
        timeline=sections.timeline(facts),
        utilization=utilization_section(facts),
        memory_usage=memory_section(facts, options.batch_size),
        run=run_section(options.run, advice.correction, summary.step_time_us) if options.run is not None else None,
        prediction=prediction,
    )


def run_section(run: s.Run, correction: s.OverheadCorrection | None, step_time_us: float | None) -> s.Run:
    """The capture's run section with what the analysis measured: the profiler's overhead, like with like (the
    trace's median step over the reference), and each GPU's energy per step."""
    measured = {"recorded_step_us": correction.profiled_step_us, "profiler_overhead": correction.overhead} \
        if correction is not None else {}
    return msgspec.structs.replace(run, overhead_correction=correction, energy_per_step=_energy(run, step_time_us),
                                   **measured)


def _energy(run: s.Run, step_time_us: float | None) -> list[s.StepEnergy]:
    """Each GPU's mean window power x the unprofiled step time (the recorded step, which carries the profiler's
    overhead, when no reference was timed)."""
    step_us, basis = ((run.unprofiled_step_us, "unprofiled step time") if run.unprofiled_step_us
                      else (step_time_us, "step time"))
    if not step_us:
        return []
    gpus = run.telemetry.gpu if run.telemetry is not None else []
    return [s.StepEnergy(gpu=g.index, joules=round(origin_energy(g.power_mean_w, step_us * 1e3), 4), basis=basis)
            for g in gpus if g.power_mean_w is not None]


def job(main: s.Report, parts: JobParts) -> s.Report:
    """The job's Report: the main rank's (the straggler's, else the slowest rank's) with every rank's row, every
    file, and the cross-rank section."""
    return msgspec.structs.replace(main, ranks=parts.ranks, source=s.Source(paths=parts.paths,
                                                                             format=main.source.format),
                                   cross_rank=parts.cross_rank)
