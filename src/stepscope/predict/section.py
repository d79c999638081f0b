"""The report's `prediction` section: the origin as measured, each target as predicted, with cost and energy."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import msgspec

from stepscope.analysis.costs import primary_device
from stepscope.analysis.facts import Facts
from stepscope.errors import StepscopeError
from stepscope.hardware import GpuSpec, HardwareTable, load_table
from stepscope.model import report as s
from stepscope.model.calibration import ProfilerCost
from stepscope.predict import cost, energy
from stepscope.predict.gpus import resolve, roof_pair, roofline_bias
from stepscope.predict.host import read_host
from stepscope.predict.measured_error import measured_error
from stepscope.predict.scaling import FLOOR_NS
from stepscope.predict.target import StepView, TargetRun, origin_replayed, run_target, view
from stepscope.predict.work import gpu_work
from stepscope.replay.recorded import RecordedCost, recorded_cost
from stepscope.units import report_us as _us

MODEL = "stepscope.predict/1"
TIE = 0.005  # targets within this of the fastest (cheapest) are marked fastest (cheapest) too


@dataclass(frozen=True)
class PredictRequest:
    """What the user asked for: target GPUs (ids, aliases or device names) and the figures cost needs."""

    gpus: tuple[str, ...]
    prices: dict[str, float] = field(default_factory=dict)  # table id -> USD per GPU-hour (--price)
    samples_per_epoch: int | None = None
    steps_per_epoch: int | None = None
    host_speed: float = 1.0  # the target host runs host code this many times as fast as the origin's
    origin: str | None = None  # the origin GPU, when the trace's device name is not in the table
    target_host: ProfilerCost | None = None  # the target machine's calibration (--target-host): its host's speed


def parse_gpus(text: str) -> tuple[str, ...]:
    gpus = tuple(dict.fromkeys(g.strip() for g in text.split(",") if g.strip()))
    if not gpus:
        raise StepscopeError(f"--gpu {text!r}: name at least one GPU, e.g. --gpu h100,h200,a100-80gb,l4")
    return gpus


def checked_request(gpus_text: str, *, prices: list[str], origin: str | None = None, target_host: str | None = None,
                    samples_per_epoch: int | None = None, steps_per_epoch: int | None = None,
                    host_speed: float = 1.0) -> PredictRequest:
    """The request a command line makes, every GPU name (targets and origin) and price checked against the table
    before any analysis runs, and the target machine's calibration read (`target_host`: its run folder or file)."""
    table = load_table()
    names = parse_gpus(gpus_text)
    for name in names:
        resolve(table, name, "target GPU")
    if origin:
        resolve(table, origin, "origin GPU")
    return PredictRequest(gpus=names, prices=cost.parse_prices(prices, table), samples_per_epoch=samples_per_epoch,
                          steps_per_epoch=steps_per_epoch, host_speed=host_speed, origin=origin,
                          target_host=read_host(target_host) if target_host else None)


@dataclass(frozen=True)
class _Origin:
    """The device the trace was recorded on, matched to the GPU table."""

    device: int
    name: str
    spec: GpuSpec
    view: StepView
    note: str | None = None  # what matching the trace's device name to a row had to assume


def _origin(facts: Facts, request: PredictRequest, table: HardwareTable, seen: Facts) -> _Origin:
    """The origin GPU, and its step as the targets' are compared with: `seen` (the facts as measured, or a recorded
    trace's replayed without the profiler's host cost)."""
    trace = facts.trace
    device = primary_device(trace)
    if device is None or len(facts.steps) == 0:
        raise StepscopeError(f"{trace.meta.path}: no GPU activity in the steps: there is nothing to predict",
                             hint="predict needs a trace recorded on a GPU")
    info = next((d for d in trace.meta.devices if d.id == device), None)
    name = info.name if info else ""
    if request.origin:
        spec = resolve(table, request.origin, "origin GPU")
    elif not name:
        raise StepscopeError(f"{trace.meta.path}: the trace does not name its GPU",
                             hint="say which it was: --origin h100 (see docs/hardware.md)")
    else:
        match = table.lookup(name, info.sm_count if info else None)
        if match is None:
            raise StepscopeError(f"{trace.meta.path}: the trace's GPU {name!r} is not in the hardware table",
                                 hint="say which row it is with --origin GPU, or add it in your hardware file "
                                      "(docs/hardware.md)")
        spec = match.spec
        return _Origin(device=device, name=name, spec=spec, view=view(seen, device), note=match.note)
    return _Origin(device=device, name=name or spec.name, spec=spec, view=view(seen, device))


def _sources(table: HardwareTable, specs: list[GpuSpec], price_sources: list[str | None]) -> list[str]:
    ids: list[str] = []
    for spec in specs:
        ids += [c.source for _, c in spec.cells() if c.source]
        for link_id in spec.links.value or ():
            link = table.interconnect(link_id)
            if link is not None and link.per_direction_gbs.source:
                ids.append(link.per_direction_gbs.source)
    ids += [p for p in price_sources if p]
    out = []
    for sid in dict.fromkeys(ids):
        source = table.sources.get(sid)
        out.append(f"{sid}: {source.title}" + (f" ({source.url})" if source.url else "") if source else sid)
    bias = roofline_bias()
    if any(spec.id in bias["gpus"] for spec in specs):  # type: ignore[operator]
        doc = bias["source"]
        out.append(f"roofline bias: {doc['title']} ({doc['url']})")  # type: ignore[index]
    return out


def _target(run: TargetRun, origin: _Origin, request: PredictRequest, batch_size: int | None,
            power_w: float | None, price: cost.GpuPrice | None, scale: float = 1.0,
            profiler: RecordedCost | None = None) -> s.PredictionTarget:
    v, spec = run.view, run.roofs.spec
    err = measured_error()
    step_ns = v.step_ns * scale
    spread = err.gpu_time_error * v.gpu_ns * scale
    step_s = step_ns / 1e9
    sps = batch_size / step_s if batch_size and step_s else None
    usd = price.usd_per_gpu_hour if price else None
    assumptions = ["the host's timeline (data loading, CPU work, launches) as measured on the origin"
                   + ("" if request.host_speed == 1.0 else ", scaled by --host-speed"),
                   *([f"{profiler.text}, from the origin's step and the target's alike"] if profiler else []),
                   *run.assumptions]
    watts, how = energy.target_power(power_w, origin.spec.tdp_w.value, spec.tdp_w.value,
                                     origin.view.utilization, v.utilization)
    assumptions.append(how)
    if price is not None:
        assumptions.append(f"price: {price.what}")
    else:
        assumptions.append(f"no price for the {spec.name} in the table: give --price {spec.id}=USD_PER_HOUR")
    if not err.validated(origin.spec.id, spec.id):
        assumptions.append(f"the model's error was measured between {_pairs_text(err)} only; for "
                           f"{origin.spec.id} -> {spec.id} the interval assumes the same error")
    epoch = None
    if usd is not None and request.steps_per_epoch:
        epoch = cost.cost_per_step(usd, step_s) * request.steps_per_epoch  # type: ignore[operator]
    elif usd is not None and request.samples_per_epoch and sps:
        epoch = usd / 3600 * request.samples_per_epoch / sps
    return s.PredictionTarget(
        gpu=spec.id, name=spec.name,
        step_time_us=_us(step_ns), low_us=_us(max(step_ns - spread, 0.0)), high_us=_us(step_ns + spread),
        samples_per_s=round(sps, 2) if sps else None,
        bottleneck=v.bottleneck,
        price_per_gpu_hour=round(usd, 4) if usd is not None else None,
        cost_per_million_samples=_money(cost.cost_per_million_samples(usd, sps)),
        energy_j_per_step=_round(watts * step_s, 4) if watts is not None else None,
        assumptions=list(dict.fromkeys(assumptions)),
        gpu_utilization=_round(v.utilization, 4), gpu_time_us=_us(v.gpu_ns),
        cost_per_epoch=_money(epoch),
    )


def _pairs_text(err: object) -> str:
    pairs = sorted(" and ".join(sorted(p)) for p in err.pairs)  # type: ignore[attr-defined]
    return ", ".join(pairs) or "no GPUs"


def _marked(targets: list[s.PredictionTarget]) -> list[s.PredictionTarget]:
    """The targets with the fastest and the cheapest marked; ties (a host-bound job runs as fast everywhere) are
    all marked. Cheapest per step, which ranks the same as per sample: every target runs the same batch."""
    if not targets:
        return targets
    fastest = min(t.step_time_us for t in targets)
    priced = [t.price_per_gpu_hour * t.step_time_us for t in targets if t.price_per_gpu_hour is not None]
    cheapest = min(priced) if priced else None
    return [msgspec.structs.replace(
        t, fastest=t.step_time_us <= fastest * (1 + TIE),
        cheapest=(t.price_per_gpu_hour is not None and cheapest is not None
                  and t.price_per_gpu_hour * t.step_time_us <= cheapest * (1 + TIE)))
        for t in targets]


def predict(facts: Facts, request: PredictRequest, *, batch_size: int | None = None, power_w: float | None = None,
            table: HardwareTable | None = None, step_range: str | None = None,
            today: dt.date | None = None, measured_step_ns: float | None = None,
            recorded: bool = False) -> s.Prediction:
    """The prediction section for a trace's facts: each requested GPU's step time, cost and energy. With the
    `measured_step_ns` of the job on the origin (the step meter's), the origin is that step and each target's
    replayed step is scaled by measured / the origin's replayed step: the replay gives the ratio, the meter the base.
    `recorded`: a trace recorded without a calibration (advice.context.Context.recorded, as the advice takes it):
    the profiler's host cost replay/recorded.py decides is taken out of the origin's step and every target's alike,
    so that neither a host the profiler slowed caps the targets nor its removal counts as their speedup."""
    table = table or load_table()
    profiler = recorded_cost(facts.trace) if recorded and primary_device(facts.trace) is not None else None
    seen = origin_replayed(facts, profiler.cost, step_range) if profiler is not None else facts
    origin = _origin(facts, request, table, seen)
    warnings: list[str] = [origin.note] if origin.note else []
    replayed = origin.view.step_ns
    scale = measured_step_ns / replayed if measured_step_ns and replayed else 1.0
    if scale != 1.0:
        warnings.append(f"the origin's step is the step meter's {measured_step_ns / 1e6:.2f} ms (the replay's "
                        f"{replayed / 1e6:.2f} ms); each target's replayed step is scaled by {scale:.3f}")
    targets, prices = [], []
    specs = [resolve(table, g, "target GPU") for g in request.gpus]
    for spec in dict.fromkeys(specs):
        roofs_o, roofs_t = roof_pair(origin.spec, spec, table, origin.name)
        work = gpu_work(facts.trace, origin.device, roofs_o)
        run = run_target(facts, origin.device, work, roofs_o, roofs_t, request.host_speed, step_range,
                         profiler.cost if profiler is not None else None)
        price = cost.price_for(spec.id, table, request.prices, today)
        if price is not None and price.stale:
            warnings.append(price.stale)
        prices.append(price.source if price else None)
        targets.append(_target(run, origin, request, batch_size, power_w, price, scale, profiler))
    targets = _marked(targets)
    step = replayed * scale
    sps = batch_size / (step / 1e9) if batch_size and step else None
    err = measured_error()
    return s.Prediction(
        origin=s.PredictionOrigin(
            gpu=origin.spec.id, name=origin.name, step_time_us=_us(step),
            energy_j_per_step=_round(energy.origin_energy(power_w, step), 4), samples_per_s=_round(sps, 2),
            bottleneck=origin.view.bottleneck, gpu_utilization=_round(origin.view.utilization, 4), power_w=power_w),
        targets=targets,
        model=(f"{MODEL}: each GPU activity's time above a {FLOOR_NS / 1000:g} µs floor scaled by the origin/target "
               "ratio of the roof that bounds it (peak FLOP/s of its dtype, memory bandwidth, SMs x clock, PCIe or "
               "GPU-to-GPU link), then the steps replayed with the host's timeline as measured"
               + (" less the profiler's host cost, on the origin and the targets alike" if profiler else "")
               + "; interval: "
               f"±{err.gpu_time_error:.0%} of the GPU time per step, the largest error measured on "
               f"{err.workloads} workloads ({_pairs_text(err)}); energy on the origin: mean NVML power x step time"),
        sources=_sources(table, [origin.spec, *dict.fromkeys(specs)], prices),
        warnings=list(dict.fromkeys(warnings)),
    )


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(float(x), digits)


def _money(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)
