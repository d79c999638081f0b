"""One story at the end of a tune: the diagnosis of the tuned configuration knows the ladder.

Its report is given, before it is assembled, what the tune measured unprofiled (the tuned configuration's windows:
its unprofiled reference, so its samples/s are the tune's), notes of what the ladder did, and which
recommendations the ladder settled (`settled_by`, the analysis' `settled` option): the Report is assembled without
those it applied or measured as no gain ("measured: 1.03x (0.98-1.08, 6 windows), not kept" is said instead). The
same list, without them, is the tune's `final_recommendations`.
"""

from __future__ import annotations

from collections.abc import Callable

from stepscope.model.report import Recommendation, Report
from stepscope.model.tune import FinalRecommendation, Trial, Tune
from stepscope.tune.fixes import carrying
from stepscope.tune.wire import LadderEntry


def ladder_entries(tune: Tune) -> list[LadderEntry]:
    """Per fix the ladder tried: kept, or not kept and why (its last trial: measured as no gain, could not be
    measured, changed the numerics, found nothing to change). The final diagnosis recommends none of them again."""
    entries: dict[str, LadderEntry] = {}
    for t in tune.trials:
        for fix in t.tried:
            if fix in tune.applied and t.accepted:  # the trial that kept it (a later setting of it may have failed)
                entries[fix] = LadderEntry(id=fix, kept=True, text=f"applied by stepscope tune ({_measured(t)})")
            elif fix not in tune.applied and (why := _not_kept(t)):
                entries[fix] = LadderEntry(id=fix, kept=False, text=why)
    return list(entries.values())


def _not_kept(t: Trial) -> str:
    """What the ladder found of a trial it did not keep, in words; "" for one it kept."""
    if t.accepted:
        return ""
    if t.decision in ("drop", "undecided"):
        return f"measured: {_measured(t)}, not kept" if t.gain is not None else f"not kept: {t.reason}"
    if t.decision in ("failed", "numerics", "not applied"):
        return f"tried by stepscope tune, not kept: {t.reason}"
    return ""


def _measured(t: Trial) -> str:
    if t.interval:
        return f"{t.gain:.2f}x ({t.interval[0]:.2f}-{t.interval[1]:.2f}, {t.windows} windows)"
    return f"{t.gain:.2f}x (no interval: {t.windows} window{'s' if t.windows != 1 else ''})"


def known(rec: Recommendation, ladder: list[LadderEntry]) -> LadderEntry | None:
    """What the ladder did with the fix that carries out this recommendation, if anything."""
    fix = carrying(rec.id)
    return next((e for e in ladder if e.id == fix), None) if fix is not None else None


def settled_by(ladder: list[LadderEntry]) -> Callable[[Recommendation], str | None]:
    """What the analysis is told of each recommendation (its `settled` option): None, not settled by the ladder;
    "" for a fix it applied (said by `ladder_notes`); what was measured for one it measured as no gain."""
    def settled(rec: Recommendation) -> str | None:
        entry = known(rec, ladder)
        if entry is None:
            return None
        if entry.kept:
            return ""
        return (f"{rec.id} (estimated ~{rec.estimated_speedup:.2f}x): {entry.text}" if rec.estimated_speedup
                else f"{rec.id}: {entry.text}")
    return settled


def final_recommendations(report: Report, ladder: list[LadderEntry]) -> list[FinalRecommendation]:
    return [FinalRecommendation(id=r.id, title=r.title, estimated_speedup=r.estimated_speedup)
            for r in report.recommendations if known(r, ladder) is None]


def ladder_notes(ladder: list[LadderEntry], samples_per_s: float | None, steps_per_s: float | None) -> list[str]:
    """The notes the final diagnosis starts with: the tune's own measurement and what it applied."""
    notes = []
    if samples_per_s or steps_per_s:
        rate = f"{samples_per_s:,.1f} samples/s" if samples_per_s else f"{steps_per_s:,.3g} steps/s"
        notes.append(f"stepscope tune measured this configuration unprofiled at {rate} (its timed windows, "
                     "interleaved with the program as it was): its unprofiled reference here")
    applied = [e.id for e in ladder if e.kept]
    if applied:
        notes.append(f"stepscope tune applied {', '.join(applied)} from outside the program: their recommendations "
                     "are not repeated")
    return notes
