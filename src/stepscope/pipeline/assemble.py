"""The one module that builds a Report: from the parts the analyses give (pipeline/sections.py, usage.py), the
patterns and recommendations the advice returns, the prediction, and a live capture's run section. A Report is
frozen once built; a job of several ranks is the main rank's Report with the cross-rank parts, built here too."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from stepscope.advice import Advice
from stepscope.analysis.facts import Facts
from stepscope.analysis.trace_checks import late_kernels_note, untimed_ops_note
from stepscope.hardware import userpaths
from stepscope.model import report as s
from stepscope.noise import headline_noise
from stepscope.pipeline import sections
from stepscope.pipeline.batch import Batch
from stepscope.pipeline.batch_sizes import batch_sizes
from stepscope.pipeline.meter import replay_phases
from stepscope.pipeline.options import AnalyzeOptions
from stepscope.pipeline.profiler_cost import overhead_correction, replay_notes, replay_section
from stepscope.pipeline.timeline import Timeline
from stepscope.pipeline.usage import memory_section, utilization_section
from stepscope.predict.energy import origin_energy
from stepscope.replay.deperturb import Deperturbed
from stepscope.units import ns_text
from stepscope.version import __version__

if TYPE_CHECKING:
    from stepscope.ranks.to_report import JobParts  # a job's parts: only the several-ranks road makes them

GENERATOR = f"stepscope {__version__}"


def report(facts: Facts, advice: Advice, options: AnalyzeOptions, batch: Batch,
           prediction: s.Prediction | None = None, prediction_notes: tuple[str, ...] = (),
           timeline: Timeline | None = None, meter: s.Meter | None = None) -> s.Report:
    """One trace's Report. Notes: the capture's, the trace's, what the step meter's headline stands on, how the
    timeline was made, the batch size when it was not given, how the verdict was taken, the prediction's, then the
    recommendations left out as settled (`options.settled`), then the user's places that could not be read."""
    trace = facts.trace
    dep = timeline.deperturbed if timeline is not None else None
    replay = replay_section(dep, timeline.timeline_path) if dep is not None and timeline is not None else None
    if replay is not None and meter is not None:
        replay = msgspec.structs.replace(replay, phases=replay_phases(facts, meter))
    steps = sections.step_rows(facts)
    summary = msgspec.structs.replace(headline(sections.summary(facts, batch.size), options, batch.size, meter),
                                      batch_size=batch.size, batch_size_source=batch.source,
                                      noise=headline_noise(options.reference, [r.duration_us for r in steps]))
    devices = sections.devices(trace)
    recommendations, settled_notes = unsettled(advice.recommendations, options)
    utilization = utilization_section(facts)  # before the notes: the hardware files it skipped are said there
    memory_usage = memory_section(facts, batch.size)
    return s.Report(
        generator=GENERATOR,
        source=s.Source(paths=[trace.meta.path], format=trace.meta.format),
        device=devices[0] if devices else None,
        devices=devices,
        accelerator=trace.meta.accelerator,
        rank=trace.meta.rank,
        world_size=trace.meta.world_size,
        steps=steps,
        summary=summary,
        gpu=sections.gpu(facts),
        kernels=sections.kernels(facts),
        syncs=sections.syncs(facts),
        copies=sections.copies(facts),
        memory=sections.memory(facts),
        patterns=advice.patterns,
        recommendations=recommendations,
        notes=[*options.capture_notes, *(timeline.notes if timeline else ()), *trace.meta.notes,
               *filter(None, [untimed_ops_note(trace), late_kernels_note(facts.kernels.launch_delay_ns)]),
               *meter_notes(meter), *replay_notes(replay), *([batch.note] if batch.note else []), *advice.notes,
               *prediction_notes, *settled_notes, *userpaths.take_notes()],
        lines=sections.lines(facts, meter),
        modules=sections.modules(facts, meter),
        timeline=sections.timeline(facts),
        utilization=utilization,
        memory_usage=memory_usage,
        run=run_section(options.run, dep, summary.step_time_us) if options.run is not None else None,
        prediction=prediction,
        replay=replay,
        meter=meter,
        considered=advice.considered,
        batch_sizes=batch_sizes(summary, recommendations, memory_usage, devices[0] if devices else None),
    )


def headline(summary: s.Summary, options: AnalyzeOptions, batch_size: int | None,
             meter: s.Meter | None = None) -> s.Summary:
    """A live capture's headline step is its unprofiled step (the job as it runs, not as the profiler saw it); the
    steps table's mean stays beside it. With the step meter, the breakdown's parts add up to that step: the data wait
    is the meter's, and the rest of the step is divided among the other parts as the profiled steps divide theirs."""
    ref = options.reference
    if ref is None or not ref.step_us:
        return summary
    steps_per_s = 1e6 / ref.step_us
    breakdown = summary.breakdown_us
    if meter is not None:
        breakdown = breakdown_on(summary.breakdown_us, meter.step_us, meter.phase_us("data"))
    return msgspec.structs.replace(
        summary, step_time_us=ref.step_us, timeline_step_time_us=summary.step_time_us, breakdown_us=breakdown,
        steps_per_s=round(steps_per_s, 3), samples_per_s=round(steps_per_s * batch_size, 2) if batch_size else None)


def breakdown_on(breakdown_us: dict[str, float], step_us: float, data_us: float) -> dict[str, float]:
    """The trace's breakdown fitted to the meter's step: `dataloader` is the meter's data wait, every other part keeps
    its proportion of the rest; the parts add up to `step_us` (to rounding)."""
    total = sum(v for k, v in breakdown_us.items() if k != "dataloader")
    left = max(step_us - data_us, 0.0)
    out = {k: round(data_us, 3) if k == "dataloader" else round(v / total * left, 3) if total > 0 else 0.0
           for k, v in breakdown_us.items()}
    out.setdefault("dataloader", round(data_us, 3))
    if total <= 0 and "other" in out:
        out["other"] = round(left, 3)
    return out


def with_reference(run: s.Run | None, reference: s.Reference | None) -> s.Run | None:
    """The run section with the meter's reference as its unprofiled step."""
    if run is None or reference is None:
        return run
    return msgspec.structs.replace(run, reference=reference, unprofiled_step_us=reference.step_us)


def meter_notes(meter: s.Meter | None) -> list[str]:
    """What the report says of its headline: which steps it stands on, and a process the profiler changed."""
    if meter is None:
        return []
    notes = [f"step meter: the headline is the mean of {meter.steps} unprofiled steps ({meter.basis}; median "
             f"{ns_text(meter.median_us * 1e3)}, p10-p90 {ns_text(meter.p10_us * 1e3)}-{ns_text(meter.p90_us * 1e3)}"
             + (f"; the program's first step {ns_text(meter.first_step_us * 1e3)} is left out" if meter.first_step_us
                else "") + ")"]
    if meter.warming_left_out:
        notes.append(f"the first {meter.warming_left_out} of the steps before the profiler were still getting faster "
                     "(warm-up): the headline is the steady ones after them")
    if meter.stalls_us:
        stalls = ", ".join(ns_text(us * 1e3) for us in meter.stalls_us)
        notes.append(f"{len(meter.stalls_us)} one-off stall{'s' if len(meter.stalls_us) > 1 else ''} among the steps "
                     f"before the profiler ({stalls}, over 3x their median: a start-up cost such as the first full "
                     "garbage collection) left out of the headline: in so few steps one would weigh as if it came "
                     f"every {meter.steps + len(meter.stalls_us)}th step")
    if meter.warming is not None:
        notes.append("the steps the headline stands on were still getting faster (their first half "
                     f"{meter.warming:.0%} slower than their second: warm-up), so the headline may run high; more "
                     "steps before the window give a steadier one (stepscope run --skip N)")
    if meter.changed_after is not None and meter.after_step_us is not None:
        way = "faster" if meter.changed_after < 0 else "slower"
        notes.append(f"the process ran {abs(meter.changed_after):.0%} {way} after the profiler "
                     f"({ns_text(meter.after_step_us * 1e3)} per step over {meter.after_steps} steps) than "
                     f"before it: {_why_changed(meter)}; the figures are the steps before it")
    return notes


# Other processes' load moved by at least this many cores between the steps before the profiler and after it: the
# machine, not (only) the profiler, may have changed the process's speed.
LOAD_MOVED_CORES = 0.5


def _why_changed(meter: s.Meter) -> str:
    """What changed the process: the machine's other load, when it moved the same way, else the profiler."""
    before, after = meter.others_cores_before, meter.others_cores_after
    profiler = "its large allocations can raise glibc's mmap threshold, for one"
    if before is None or after is None:
        return f"the profiler may have changed it ({profiler}), or other processes' load on the machine"
    moved = after - before
    faster = (meter.changed_after or 0.0) < 0
    if abs(moved) >= LOAD_MOVED_CORES and (moved < 0) == faster:  # less load, faster; more load, slower
        return (f"other processes kept {before:.1f} cores busy while the headline's steps ran and {after:.1f} "
                "after the profiler started: the machine's load changed, which may be why, not the profiler")
    return (f"the profiler changed it ({profiler}; other processes' load stayed at {before:.1f}-{after:.1f} "
            "cores)")


def unsettled(recommendations: list[s.Recommendation],
              options: AnalyzeOptions) -> tuple[list[s.Recommendation], list[str]]:
    """The recommendations not already acted on, and a note for each one left out that has something to say."""
    if options.settled is None:
        return recommendations, []
    kept, notes = [], []
    for rec in recommendations:
        said = options.settled(rec)
        if said is None:
            kept.append(rec)
        elif said:
            notes.append(said)
    return kept, notes


def run_section(run: s.Run, dep: Deperturbed | None, step_time_us: float | None) -> s.Run:
    """The capture's run section with what the analysis measured: the profiler's overhead, like with like (the
    trace's median step over the reference) and what the replay took out of it, and each GPU's energy per step."""
    correction = overhead_correction(dep) if dep is not None else None
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
