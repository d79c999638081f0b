"""The verdict and the input fixes on the step meter (pipeline/meter.py): the meter measured the job as it runs, so
the share of the step spent waiting for data is its figure, not the profiled trace's; the profile only divides the
rest of the step among its causes (op math, Python and dispatch, kernels, launches, copies).

- input_bound's share is the meter's data wait; a wait the profiled run showed but the plain run does not have is
  dropped and said, and one the profiler hid (a slowed main process lets one worker keep up) is found.
- every other pattern keeps its share of the step outside the data wait: share x (1 - meter's) / (1 - trace's).
- dataloader_workers is recommended whenever the main thread waits for data, its estimate from the meter's own
  figures: the main thread's work per step, and the time a worker takes per batch (its CPU part on the cores).
"""

from __future__ import annotations

import math

import msgspec

from stepscope.advice.crossing import crossing_us
from stepscope.advice.found import MIN_SHARE
from stepscope.advice.recommendation import in_framework
from stepscope.advice.restarts import short_epochs
from stepscope.advice.rules import ranked
from stepscope.model import report as s
from stepscope.model.meter import Meter, MeterWorkers
from stepscope.units import ns_text, rounded_ratio

# Workers suggested where there are no DataLoader workers yet and the free cores are not known.
FIRST_WORKERS = 2
# A main-process fetch whose CPU time is under this share of its wall time mostly waits (storage, a network, a
# sleep): workers wait side by side, so more of them than cores still help, up to MAX_WAITING_WORKERS.
WAITING_SHARE = 0.5
MAX_WAITING_WORKERS = 8
# Workers busy less than this share of the time while the training loop waits for them: the wait is not the loading
# (more workers would idle too) but the handing over of batches between processes.
IDLE_WORKERS = 0.5


def on_meter(patterns: list[s.Pattern], meter: Meter) -> tuple[list[s.Pattern], list[str]]:
    """The patterns with the meter's data wait as input_bound's share and the rest scaled into what is left."""
    measured = meter.phase_share("data")
    traced = next((p for p in patterns if p.id == "input_bound"), None)
    traced_share = traced.share if traced is not None else 0.0
    scale = (1 - measured) / (1 - traced_share) if traced_share < 0.999 else 0.0
    notes = []
    out = [_rescaled(p, scale) for p in patterns if p.id != "input_bound"]
    if measured >= MIN_SHARE:
        out.append(_input_bound(meter, measured, traced))
        if traced_share < measured / 2:
            notes.append(f"the step meter saw the training loop wait for data {measured:.0%} of each step when it ran "
                         f"unprofiled, the profiled steps {traced_share:.0%}: the profiled steps hid it (the profiler "
                         "slows the main process, so the loader keeps up); input_bound is the meter's")
    elif traced is not None:
        notes.append(f"the profiled steps waited for data {traced_share:.0%} of each step, the unprofiled ones "
                     f"{measured:.0%}: the wait is the profiler's, not the job's, and is left out of the verdict")
    return sorted(out, key=lambda p: -p.share), notes


def _rescaled(p: s.Pattern, scale: float) -> s.Pattern:
    return msgspec.structs.replace(p, share=rounded_ratio(p.share * scale),
                                   evidence={**p.evidence, "profiled_share_of_step": p.share})


def _idle(workers: int | None, w: MeterWorkers | None) -> bool:
    """DataLoader workers busy less than IDLE_WORKERS of the time while the loop waits for them: what the verdict
    says and what `dataloader_workers` then recommends (num_workers=0) stand on this one test."""
    return bool(workers) and w is not None and w.busy_share < IDLE_WORKERS


def _input_bound(meter: Meter, share: float, traced: s.Pattern | None) -> s.Pattern:
    wait = meter.phase_us("data")
    workers = meter.num_workers
    w = meter.workers
    plural = "s" if workers != 1 else ""
    how = ("single-process loading: num_workers=0" if workers == 0 else
           f"{workers} worker{plural} idle {1 - w.busy_share:.0%} of the time: the wait is handing batches between "
           "processes" if _idle(workers, w) else
           f"{workers} worker{plural} cannot keep up" if workers else "")
    title = (f"The training loop waits for the DataLoader {share:.0%} of each step, measured unprofiled"
             + (f" ({how})." if how else "."))
    evidence: dict = {**(traced.evidence if traced is not None else {}),
                      "dataloader_wait_share": rounded_ratio(share), "dataloader_wait_us_per_step": round(wait, 1),
                      "measured_by": "step meter", "num_workers": workers}
    if w is not None:
        evidence.update(worker_batch_us=w.batch_us, worker_batch_cpu_us=w.batch_cpu_us, workers_busy=w.busy_share)
    return s.Pattern(id="input_bound", share=rounded_ratio(share), title=title, evidence=evidence)


def workers_from_meter(meter: Meter, settings: s.Settings | None,
                       recommendations: list[s.Recommendation]) -> list[s.Recommendation]:
    """dataloader_workers from the meter when the main thread waits for data: replaces the trace's estimate."""
    share = meter.phase_share("data")
    if share < MIN_SHARE:
        return [r for r in recommendations if r.id != "dataloader_workers"]
    traced = next((r for r in recommendations if r.id == "dataloader_workers"), None)
    rec = workers_recommendation(meter, settings, traced)
    rest = [r for r in recommendations if r.id != "dataloader_workers"]
    return ranked([*rest, rec] if rec is not None else rest)


def workers_recommendation(meter: Meter, settings: s.Settings | None,
                           traced: s.Recommendation | None) -> s.Recommendation | None:
    step = meter.step_us
    wait = meter.phase_us("data")
    main = max(step - wait, 0.0)  # the main thread's own work per step
    workers = meter.num_workers if meter.num_workers is not None else (
        settings.dataloader.num_workers if settings is not None and settings.dataloader is not None else None)
    cores = meter.cpu_cores or (settings.cpu_cores if settings is not None else None)
    threads = settings.intra_op_threads if settings is not None and settings.intra_op_threads else 1
    w = meter.workers
    if _idle(workers, w):
        assert workers and w is not None
        return _in_main_process(meter, w, workers, main, wait, traced, settings)
    # From loading in the main process, each batch crosses from a worker (advice/crossing.py): its rebuild is the
    # main thread's work, its collate into shared memory the worker's. Already in workers, the step has it.
    batch_bytes = settings.dataloader.batch_bytes if settings is not None and settings.dataloader else None
    rebuild, shared = crossing_us(batch_bytes) if not workers else (0.0, 0.0)
    if workers:  # loading in workers: a batch costs each worker batch_us, its CPU part batch_cpu_us
        batch = w.batch_us if w is not None else step * workers  # unseen workers: they deliver one batch a step
        cpu = w.batch_cpu_us if w is not None and w.batch_cpu_us is not None else batch
        target = workers * 2
    else:  # loading in the main thread: the whole wait is the batch's cost; on a CPU, at most the process's CPU
        batch, cpu, target = wait + shared, _fetch_cpu(meter, wait) + shared, FIRST_WORKERS
    waiting = not workers and cpu - shared < WAITING_SHARE * wait  # a main-process fetch that mostly waits
    if waiting:  # enough workers to hide the wait behind the step's work
        target = min(max(math.ceil(wait / max(main + rebuild, 1.0)), FIRST_WORKERS), MAX_WAITING_WORKERS)
    # k workers deliver a batch every batch/k; the main thread's work (on its intra-op threads) and the batch's CPU
    # time share the process's cores, which bounds the step from below however many workers wait on storage.
    new = max(main + rebuild, batch / target)
    if workers:  # what the step takes beyond its bound now (the batch's delivery, say) stays: k'/k at most
        new += max(step - max(main, batch / workers), 0.0)
    why = f"{target} workers deliver a batch every {ns_text(batch / target * 1e3)}"
    if waiting:
        why = (f"the fetch mostly waits (the process's CPU time is {ns_text(cpu * 1e3)} a step beside its "
               f"{ns_text(wait * 1e3)} wait), so workers wait side by side: {why}")
    if cores:
        cpu_floor = (main * min(threads, cores) + rebuild + cpu) / cores
        if cpu_floor > new:
            new, why = cpu_floor, (f"the main thread's work and the batch's CPU time ({ns_text(cpu * 1e3)}) share "
                                   f"{cores} core{'s' if cores != 1 else ''}")
    if rebuild:
        why += (f"; each batch's {_bytes_text(batch_bytes)} crosses from its worker through shared memory: "
                f"~{ns_text(shared * 1e3)} more in the worker, ~{ns_text(rebuild * 1e3)} in the main thread")
    speedup = step / new if new > 0 else 1.0
    text = (f"From the step meter (unprofiled): the main thread works {ns_text(main * 1e3)} per step and waits "
            f"{ns_text(wait * 1e3)} for data; {why}: step {ns_text(step * 1e3)} -> ~{ns_text(new * 1e3)} "
            f"({speedup:.2f}x). An estimate, not a measurement: `stepscope tune` measures it.")
    now = f" (now {workers})" if workers is not None else ""
    title = f"Load batches in more DataLoader worker processes: num_workers={target}{now}"
    if workers == 0:
        keep = settings is not None and short_epochs(meter, settings.dataloader)
        title = (f"Load batches in worker processes: DataLoader(..., num_workers={target}"
                 + (", persistent_workers=True)" if keep else ")"))
        if keep:
            assert settings is not None and settings.dataloader is not None
            text += (f" An epoch is {settings.dataloader.batches_per_epoch} batches: persistent_workers=True keeps "
                     "the workers alive between epochs, or each epoch pays their start-up.")
    evidence = _evidence(meter, main, workers, target, traced, cpu_cores=cores,
                         free_cores=cores - threads - (workers or 0) if cores else None)
    if rebuild:
        evidence.update(batch_bytes=batch_bytes, crossing_main_us=round(rebuild, 1),
                        crossing_worker_us=round(shared, 1))
    return _workers_fix(title, evidence, speedup, text, traced, settings)


def _bytes_text(n: int | None) -> str:
    return f"{(n or 0) / 1e6:.3g} MB" if (n or 0) >= 1e5 else f"{(n or 0) / 1e3:.3g} kB"


def _fetch_cpu(meter: Meter, wait: float) -> float:
    """A main-process fetch's CPU time per step: at most the whole process's (meter.process_cpu_us, every thread),
    and at most its wall time; its wall time where the process's CPU time is not known."""
    return min(wait, meter.process_cpu_us) if meter.process_cpu_us is not None else wait


def _in_main_process(meter: Meter, w: MeterWorkers, workers: int, main: float, wait: float,
                     traced: s.Recommendation | None, settings: s.Settings | None) -> s.Recommendation | None:
    """Workers that idle while the loop waits for them: the wait is the batches' trip between processes (pickling,
    the queue, the processes sharing the cores), not their loading. Loading in the main process costs a step the
    batch's own time instead (what a worker spends on it)."""
    step = meter.step_us
    new = main + w.batch_us
    speedup = step / new if new > 0 else 1.0
    if speedup < 1.05:
        return None
    text = (f"From the step meter (unprofiled): the training loop waits {ns_text(wait * 1e3)} per step for its "
            f"batches while the {workers} worker{'s' if workers != 1 else ''} are busy {w.busy_share:.0%} of the "
            f"time and build a batch in {ns_text(w.batch_us * 1e3)}: the wait is handing batches between processes, "
            f"not loading them. Built in the main process: {ns_text(main * 1e3)} of the loop's own work + "
            f"{ns_text(w.batch_us * 1e3)} a batch: step {ns_text(step * 1e3)} -> ~{ns_text(new * 1e3)} "
            f"({speedup:.2f}x). An estimate, not a measurement: `stepscope tune` measures it.")
    title = (f"Load batches in the main process: DataLoader(..., num_workers=0) (now {workers}, idle "
             f"{1 - w.busy_share:.0%} of the time)")
    evidence = _evidence(meter, main, workers, 0, traced, workers_busy=w.busy_share)
    return _workers_fix(title, evidence, speedup, text, traced, settings)


def _evidence(meter: Meter, main: float, workers: int | None, suggested: int, traced: s.Recommendation | None,
              **more: object) -> dict:
    """What a dataloader_workers recommendation stands on: the meter's wait and main-thread work per step, the
    workers now and suggested, `more`, and the workers' own figures when they were seen."""
    wait, w = meter.phase_us("data"), meter.workers
    evidence = {**(traced.evidence if traced is not None else {}),
                "dataloader_wait_share": rounded_ratio(wait / meter.step_us),
                "dataloader_wait_us_per_step": round(wait, 1), "main_thread_us_per_step": round(main, 1),
                "num_workers": workers, "suggested_workers": suggested, **more, "measured_by": "step meter"}
    if meter.process_cpu_us is not None:
        evidence["process_cpu_us_per_step"] = meter.process_cpu_us
    if w is not None:
        evidence.update(worker_batch_us=w.batch_us, worker_batch_cpu_us=w.batch_cpu_us)
    return evidence


def _workers_fix(title: str, evidence: dict, speedup: float, text: str, traced: s.Recommendation | None,
                 settings: s.Settings | None) -> s.Recommendation:
    """The recommendation, at the loader's line (the trace's, else the one the run recorded)."""
    location = traced.location if traced is not None else (
        settings.dataloader.location if settings is not None and settings.dataloader is not None else None)
    return in_framework(s.Recommendation(id="dataloader_workers", title=title, evidence=evidence, location=location,
                                         estimated_speedup=round(speedup, 2), estimate=text), settings)
