"""Which fixes to try, in which order, with which settings: from the baseline's diagnosis (its recommendations
and their estimates) and from what the program was seen to use (its loaders, optimizer, model and device). Each
fix says itself whether it applies and what to try (tune/fixes/); this module only puts them in order.

The order is the published walk-through's (each fix's `order`): the input, the copies, the batch, the host's
per-step overhead, the arithmetic, compilation last (every run after a compile would pay it again). Each fix is
measured on the rungs kept before it, so a fix whose gain only shows once an earlier bottleneck is gone (bfloat16
after the loader keeps up) is tried after it, whatever the diagnosis of the program as it is estimated."""

from __future__ import annotations

from dataclasses import dataclass, field

from stepscope.model.report import Report
from stepscope.model.tune import NotTried
from stepscope.tune.fix import Fix, Params, PlanContext
from stepscope.tune.fixes import CODE_CHANGES, FIXES, carrying
from stepscope.tune.wire import DeviceInfo, Settings


@dataclass(frozen=True)
class Candidate:
    fixes: tuple[str, ...]  # tried together, as one rung
    options: tuple[Params, ...]  # settings to try in turn, each only while the previous one was kept
    estimate: float | None  # the diagnosis' estimated speed-up, when it made one
    source: str  # "recommended" | "applicable" | "asked"


@dataclass
class Plan:
    candidates: list[Candidate] = field(default_factory=list)
    not_tried: list[NotTried] = field(default_factory=list)


@dataclass(frozen=True)
class PlanOptions:
    only: tuple[str, ...] | None = None  # --fixes
    skip: tuple[str, ...] = ()  # --skip-fixes
    allow_batch_change: bool = False
    timed_steps: int = 23  # warm-up + timed steps of a trial: a loader shorter than this restarts its workers


def make_plan(report: Report | None, settings: Settings, device: DeviceInfo, options: PlanOptions) -> Plan:
    plan = Plan()
    estimates = _estimates(report)
    asked = set(options.only or ())
    changes = dict(_code_changes(report))
    changes.update({i: CODE_CHANGES[i] for i in sorted(asked) if i in CODE_CHANGES and i not in changes})
    for rec_id, suggestion in changes.items():
        plan.not_tried.append(NotTried(id=rec_id, reason="needs a code change", suggestion=suggestion,
                                       estimated_speedup=estimates.get(rec_id)))
    order = list(FIXES)  # the walk-through's order, compilation last
    done: set[str] = set()
    for fix_id in order:
        group = tuple(f for f in (FIXES[fix_id].together or (fix_id,)) if f not in done)
        if fix_id in done or not group:
            continue
        done.update(group)
        source = "asked" if asked & set(group) else ("recommended" if set(group) & set(estimates) else "applicable")
        wanted = [f for f in group if _wanted(f, options)
                  and (source != "applicable" or not FIXES[f].recommended_only)]
        if not wanted:
            continue
        estimate = max((estimates[f] for f in wanted if estimates.get(f)), default=None)
        options_or_reason = _options(tuple(wanted), report, settings, device, options)
        if isinstance(options_or_reason, str):
            if source != "applicable":
                plan.not_tried.append(NotTried(id="+".join(wanted), reason=options_or_reason,
                                               estimated_speedup=estimate))
            continue
        plan.candidates.append(Candidate(tuple(wanted), options_or_reason, estimate, source))
    return plan


# A phase of the step meter at least this share of the step is worth trying the fix that shrinks it.
MIN_PHASE_SHARE = 0.05
# The fix that shrinks each phase of the step meter, tried whenever the meter shows the phase (not only when the
# verdict names it): the main thread waiting for data -> more DataLoader workers.
PHASE_FIXES = {"data": "dataloader_workers"}


def _estimates(report: Report | None) -> dict[str, float | None]:
    """The fixes the report recommends, in its order (best estimated gain first), with their estimates; and the
    fixes of the phases the step meter shows."""
    found: dict[str, float | None] = {}
    for rec in report.recommendations if report is not None else []:
        fix = carrying(rec.id) or rec.id
        found.setdefault(fix, rec.estimated_speedup)
    meter = report.meter if report is not None else None
    for phase in meter.phases if meter is not None else []:
        if phase.name in PHASE_FIXES and phase.share >= MIN_PHASE_SHARE:
            found.setdefault(PHASE_FIXES[phase.name], None)
    return found


def _code_changes(report: Report | None) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for rec in report.recommendations if report is not None else []:
        if rec.id in CODE_CHANGES and rec.id not in seen:
            seen[rec.id] = f"{rec.title}: {CODE_CHANGES[rec.id]}"
    return list(seen.items())


def _wanted(fix_id: str, options: PlanOptions) -> bool:
    if fix_id in options.skip:
        return False
    return options.only is None or fix_id in options.only


def _options(fixes: tuple[str, ...], report: Report | None, settings: Settings, device: DeviceInfo,
             options: PlanOptions) -> tuple[Params, ...] | str:
    """The settings to try for these fixes, or why they cannot be tried."""
    contexts = {f: PlanContext(report, settings, device, options.allow_batch_change, options.timed_steps,
                               asked=f in (options.only or ())) for f in fixes}
    for fix_id in fixes:
        reason = _why_not(FIXES[fix_id], contexts[fix_id])
        if reason:
            return f"{fix_id}: {reason}" if len(fixes) > 1 else reason
    head = FIXES[fixes[0]]
    if head.options is not None:
        return head.options(contexts[head.id])
    merged: Params = {}
    for fix_id in fixes:
        merged.update(FIXES[fix_id].settings_to_try(contexts[fix_id])[0])
    return (merged,)


def _why_not(fix: Fix, ctx: PlanContext) -> str:
    """Why this fix cannot be tried on this program and device ('' when it can)."""
    if fix.cuda_only and ctx.device.kind != "cuda":
        return "applies to CUDA devices only"
    if fix.changes_batch and not ctx.allow_batch_change:
        return "changes the optimisation (the batch size, so the learning rate too): pass --allow-batch-change"
    if fix.needs == "loader" and ctx.loader is None:
        return "the program builds no DataLoader"
    if fix.needs == "model" and ctx.settings.model is None:
        return "no model was found (no module with parameters was called)"
    if fix.needs == "optimizer" and not ctx.settings.optimizers:
        return "the program builds no torch.optim optimizer"
    return fix.why_not(ctx)
