"""Which fixes to try, in which order, with which settings: from the baseline's diagnosis (its recommendations
and their estimates) and from what the program was seen to use (its loaders, optimizer, model and device)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stepscope.model.report import Report
from stepscope.model.tune import NotTried
from stepscope.tune.fixes import CODE_CHANGE, FIXES, ORDER, RECOMMENDED_ONLY, TOGETHER
from stepscope.tune.wire import DeviceInfo, Settings

# Tried after every other fix, in this order: a bigger batch changes what the rest is measured on, and a
# compiled model makes every trial after it pay the compilation again.
LAST = ("larger_batch", "torch_compile", "cuda_graphs")
MEMORY_HEADROOM = 0.9  # a bigger batch must leave a tenth of the device's memory free
BATCH_FACTORS = (2, 4)
MAX_WORKER_OPTIONS = 3

Params = dict[str, dict[str, Any]]  # fix id -> its settings


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
    changes.update({i: CODE_CHANGE[i] for i in sorted(asked) if i in CODE_CHANGE and i not in changes})
    for rec_id, suggestion in changes.items():
        plan.not_tried.append(NotTried(id=rec_id, reason="needs a code change", suggestion=suggestion,
                                       estimated_speedup=estimates.get(rec_id)))
    order = [i for i in estimates if i in FIXES] + [i for i in ORDER if i not in estimates]
    order.sort(key=lambda i: LAST.index(i) + 1 if i in LAST else 0)  # stable: the rest keep their order
    done: set[str] = set()
    for fix_id in order:
        group = tuple(f for f in TOGETHER.get(fix_id, (fix_id,)) if f not in done)
        if fix_id in done or not group:
            continue
        done.update(group)
        source = "asked" if asked & set(group) else ("recommended" if set(group) & set(estimates) else "applicable")
        wanted = [f for f in group if _wanted(f, options)
                  and (source != "applicable" or f not in RECOMMENDED_ONLY)]
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


def _estimates(report: Report | None) -> dict[str, float | None]:
    """Recommendation ids in the report's order (best estimated gain first), with their estimates."""
    found: dict[str, float | None] = {}
    for rec in report.recommendations if report is not None else []:
        found.setdefault(rec.id, rec.estimated_speedup)
    return found


def _code_changes(report: Report | None) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for rec in report.recommendations if report is not None else []:
        if rec.id in CODE_CHANGE and rec.id not in seen:
            seen[rec.id] = f"{rec.title}: {CODE_CHANGE[rec.id]}"
    return list(seen.items())


def _wanted(fix_id: str, options: PlanOptions) -> bool:
    if fix_id in options.skip:
        return False
    return options.only is None or fix_id in options.only


def _options(fixes: tuple[str, ...], report: Report | None, settings: Settings, device: DeviceInfo,
             options: PlanOptions) -> tuple[Params, ...] | str:
    """The settings to try for these fixes, or why they cannot be tried."""
    for fix_id in fixes:
        reason = _why_not(fix_id, settings, device, options)
        if reason:
            return f"{fix_id}: {reason}" if len(fixes) > 1 else reason
    head = fixes[0]
    if head == "dataloader_workers":
        counts = worker_counts(report, settings, device.cpu_cores)
        return tuple({"dataloader_workers": {"num_workers": n}} for n in counts) or "no worker count above the current"
    if head == "larger_batch":
        factors = batch_factors(settings, device)
        return tuple({"larger_batch": {"factor": k}} for k in factors) or "no room in device memory for a bigger batch"
    params: Params = {}
    for fix_id in fixes:
        params[fix_id] = _params(fix_id, device)
    return (params,)


def _params(fix_id: str, device: DeviceInfo) -> dict[str, Any]:
    if fix_id == "amp":
        return {"dtype": "bfloat16" if device.bf16 else "float16"}
    if fix_id == "fused_optimizer":
        return {"mode": "fused" if device.kind == "cuda" else "foreach"}
    if fix_id == "cuda_graphs":
        return {"mode": "reduce-overhead"}
    return {}


def _why_not(fix_id: str, settings: Settings, device: DeviceInfo, options: PlanOptions) -> str:
    """Why this fix cannot be tried on this program and device ('' when it can)."""
    info = FIXES[fix_id]
    if info.cuda_only and device.kind != "cuda":
        return "applies to CUDA devices only"
    if info.changes_batch and not options.allow_batch_change:
        return "changes the optimisation (the batch size, so the learning rate too): pass --allow-batch-change"
    loader = settings.loaders[0] if settings.loaders else None
    model = settings.model
    if info.needs == "loader" and loader is None:
        return "the program builds no DataLoader"
    if info.needs == "model" and model is None:
        return "no model was found (no module with parameters was called)"
    if info.needs == "optimizer" and not settings.optimizers:
        return "the program builds no torch.optim optimizer"
    return _in_effect(fix_id, settings, device, options)


def _in_effect(fix_id: str, settings: Settings, device: DeviceInfo, options: PlanOptions) -> str:
    """Why the fix would change nothing: the program does it already, or lacks what it changes ('' if neither)."""
    loader = settings.loaders[0] if settings.loaders else None
    model = settings.model
    if fix_id == "pin_memory" and loader is not None and loader.pin_memory:
        return "already in effect (pin_memory=True)"
    if fix_id == "persistent_workers":
        return _persistent_needless(settings, options)
    if fix_id == "set_to_none":
        if not settings.zero_grad:
            return "the program calls no zero_grad"
        if all(site.value for site in settings.zero_grad):
            return "already in effect (zero_grad(set_to_none=True), the default since PyTorch 2.0)"
    if fix_id == "fused_optimizer" and all(o.fused or not o.supports_fused for o in settings.optimizers):
        return "already in effect (fused, or not offered by the optimizer: foreach is the default on CUDA)"
    if model is None:
        return ""
    if fix_id == "amp" and model.autocast:
        return "already in effect (the forward runs under autocast)"
    if fix_id == "amp" and model.dtype != "float32":
        return f"the model's parameters are {model.dtype} already"
    if fix_id == "amp" and device.kind == "cpu" and not device.bf16_native and fix_id not in (options.only or ()):
        return ("this CPU has no bfloat16 in hardware (AVX512-BF16 or AMX): emulated, it is far slower; "
                "--fixes amp measures it anyway")
    if fix_id in ("channels_last", "cudnn_benchmark") and not model.conv:
        return "the model has no 2-d convolution"
    if fix_id == "channels_last" and model.channels_last:
        return "already in effect (channels_last)"
    if fix_id in ("torch_compile", "cuda_graphs") and model.compiled:
        return "already in effect (the model is compiled)"
    return ""


def _persistent_needless(settings: Settings, options: PlanOptions) -> str:
    loader = settings.loaders[0]
    if loader.persistent_workers:
        return "already in effect (persistent_workers=True)"
    if loader.batches is not None and loader.batches >= options.timed_steps and len(settings.loaders) == 1:
        return "the loader's epoch outlasts a trial: no worker restart to measure"
    return ""


def worker_counts(report: Report | None, settings: Settings, cores: int) -> list[int]:
    """Worker counts to try, fewest first: enough to load a batch while a step computes (load time per batch
    over compute time per step, plus one), twice that, and the core count when it is more."""
    current = settings.loaders[0].num_workers if settings.loaders else 0
    cap = max(2 * cores, 2)
    if current > 0:
        values = {2 * current, 4 * current}
    else:
        load, compute = _load_and_compute_us(report)
        need = math.ceil(load / compute) + 1 if load and compute else 2
        values = {need, 2 * need, min(cores, 4 * need)}
        cap = max(cap, need)
    return sorted(v for v in values if current < v <= cap)[:MAX_WORKER_OPTIONS]


def _load_and_compute_us(report: Report | None) -> tuple[float, float]:
    """The DataLoader's time per step and the rest of the step, from the diagnosis."""
    if report is None or not report.summary.step_time_us:
        return 0.0, 0.0
    step = report.summary.step_time_us
    rec = next((r for r in report.recommendations if r.id == "dataloader_workers"), None)
    wait = rec.evidence.get("dataloader_wait_us_per_step") if rec is not None else None
    load = float(wait if wait is not None else report.summary.breakdown_us.get("dataloader", 0.0))
    return load, max(step - load, 0.0)


def batch_factors(settings: Settings, device: DeviceInfo) -> Sequence[int]:
    """Batch multipliers whose peak memory (scaled from the baseline's) fits the device."""
    loader = settings.loaders[0] if settings.loaders else None
    if loader is None or not loader.batch_size:
        return ()
    peak, total = settings.peak_memory_bytes, device.total_memory_bytes
    if device.kind != "cuda" or not peak or not total:
        return BATCH_FACTORS
    return tuple(k for k in BATCH_FACTORS if k * peak <= MEMORY_HEADROOM * total)
