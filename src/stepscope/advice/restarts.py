"""`persistent_workers` from the step meter: DataLoader workers started again at each epoch's first batch.

Without persistent_workers, every epoch's iterator starts its workers again: the first batch of an epoch waits for
the processes to start and load it, a data wait far above the others (meter.restart_waits_us, RESTART_RATIO times
their median). Where epochs are short (a few batches to a few hundred), that start-up is paid often: kept alive,
the workers pay it once. The trace's rule (rules/dataloader.persistent_workers) sees a restart only when one fell
inside the few recorded steps; the meter sees every step it measured unprofiled.
"""

from __future__ import annotations

from stepscope.advice.recommendation import in_framework
from stepscope.advice.rules import ranked
from stepscope.model import report as s
from stepscope.model.meter import Meter
from stepscope.units import ns_text

TITLE = "Keep DataLoader workers alive between epochs: DataLoader(..., persistent_workers=True)"


def restart_us(meter: Meter, loader: s.LoaderSettings | None) -> float | None:
    """The workers' start-up paid at each epoch (µs, the mean excess of the epoch-start waits) where the loader
    starts them again every epoch and the meter saw it do so; None otherwise. More restarts than the epochs in the
    steps can hold (one per batches_per_epoch, and one more) are not epoch starts, nor any in steps short of one
    epoch."""
    waits = meter.restart_waits_us
    if loader is None or not loader.num_workers or loader.persistent_workers or not waits:
        return None
    per_epoch = loader.batches_per_epoch
    span = meter.steps + len(meter.stalls_us or [])
    if not per_epoch or span < per_epoch or len(waits) > span / per_epoch + 1:
        return None  # steps short of one epoch start no epoch again: their long waits are workers finishing together
    return sum(waits) / len(waits)


def persistent_from_meter(meter: Meter, settings: s.Settings | None,
                          recommendations: list[s.Recommendation]) -> list[s.Recommendation]:
    """persistent_workers from the meter's epoch starts: replaces the trace's (profiled, a few steps) where the meter
    saw the restarts; the trace's stays where it did not."""
    loader = settings.dataloader if settings is not None else None
    restart = restart_us(meter, loader)
    if restart is None:
        return recommendations
    assert loader is not None and loader.batches_per_epoch
    per_epoch = loader.batches_per_epoch
    # The job's step with its epoch starts: the headline's mean, and the stalls left out of it (the starts among them)
    stalls = meter.stalls_us or []
    step = (meter.step_us * meter.steps + sum(stalls)) / (meter.steps + len(stalls))
    new = max(step - restart / per_epoch, 1.0)
    speedup = step / new
    text = (f"From the step meter (unprofiled): {len(meter.restart_waits_us or [])} epoch start"
            f"{'s' if len(meter.restart_waits_us or []) != 1 else ''} waited {ns_text(restart * 1e3)} more than the "
            f"other batches for the {loader.num_workers} workers to start again; kept alive, the start-up is paid "
            f"once, not every {per_epoch} batches: step {ns_text(step * 1e3)} -> ~{ns_text(new * 1e3)} "
            f"({speedup:.2f}x). An estimate, not a measurement: `stepscope tune` measures it.")
    traced = next((r for r in recommendations if r.id == "persistent_workers"), None)
    evidence = {**(traced.evidence if traced is not None else {}), "restart_us": round(restart, 1),
                "restarts_seen": len(meter.restart_waits_us or []), "batches_per_epoch": per_epoch,
                "num_workers": loader.num_workers, "measured_by": "step meter"}
    rec = in_framework(s.Recommendation(id="persistent_workers", title=TITLE, evidence=evidence,
                                        location=traced.location if traced is not None else loader.location,
                                        estimated_speedup=round(speedup, 2), estimate=text), settings)
    return ranked([*(r for r in recommendations if r.id != "persistent_workers"), rec])


def short_epochs(meter: Meter, loader: s.LoaderSettings | None) -> bool:
    """Epochs no longer than the steps the meter measured: workers suggested for such a loader are worth keeping
    alive between epochs (persistent_workers), or each epoch pays their start-up."""
    return bool(loader is not None and loader.batches_per_epoch and loader.batches_per_epoch <= meter.steps_measured)
