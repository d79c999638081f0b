"""`stepscope tune`'s pure parts against hand-computed values: the numerics guard and the plan made from a diagnosis
and from what the program was seen to use (the statistics are in test_tune_stats.py)."""

from __future__ import annotations

import pytest

from stepscope.model.report import Recommendation, Report, Source, Summary
from stepscope.tune.fixes.dataloader_workers import worker_counts
from stepscope.tune.numerics import compare_losses, tolerance_for
from stepscope.tune.plan import PlanOptions, make_plan
from stepscope.tune.wire import (
    CallSite,
    DeviceInfo,
    LoaderSite,
    ModelInfo,
    OptimizerSite,
    Settings,
    TransformSite,
)

CPU = DeviceInfo(kind="cpu", name="CPU", cpu_cores=2, bf16=True)
GPU = DeviceInfo(kind="cuda", name="H100", compute_capability="9.0", total_memory_bytes=80 * 2**30, bf16=True,
                 bf16_native=True, cpu_cores=16)


# -- the numerics guard ---------------------------------------------------------------------------------

def test_losses_agree_in_the_first_steps_and_keep_their_level_after() -> None:
    n = compare_losses([2.0, 1.0, None, 0.5], [2.0, 1.01, 0.7, 0.52], tolerance=0.05, reference_rung=3)
    # Steps 1, 2 and 4 are in both: 0%, 1% and 4% apart; the early steps (1 and 2) are within 5%.
    assert n.ok and n.steps_compared == 3 and n.reference == 3
    assert n.max_rel_loss_diff == pytest.approx(0.04) and n.early_rel_diff == pytest.approx(0.01)
    # Means 3.5/3 and 3.53/3: 0.857% apart.
    assert n.mean_rel_diff == pytest.approx(0.03 / 3.5, rel=1e-3)
    early = compare_losses([2.0, 1.0, 0.5], [2.0, 1.2, 0.5], tolerance=0.05)
    assert not early.ok and early.detail.startswith("the loss differs by 20.00% at step 2 (tolerance 5%)")


def test_later_steps_may_wander_but_not_the_mean() -> None:
    flat = [2.0, 2.0] + [1.0 + 0.02 * (i % 2) for i in range(20)]
    chaotic = [2.0, 2.0] + [1.01 - 0.02 * (i % 2) for i in range(20)]  # 1-2% off at every later step
    wander = compare_losses(flat, chaotic, tolerance=0.01)
    assert wander.ok and wander.max_rel_loss_diff > 0.01 and wander.mean_rel_diff < 0.02
    drifted = compare_losses(flat, [2.0, 2.0] + [1.5] * 20, tolerance=0.01)
    # Means 24.2 / 22 = 1.1 and 34 / 22 = 1.5455: 40.5% apart. Population variances 1.784 / 22 and
    # 0.4545 / 22; the standard error of the difference sqrt((0.08109 + 0.02066) / 22) = 0.06801, three of
    # them 0.2040, 18.5% of 1.1.
    assert not drifted.ok and drifted.mean_limit == pytest.approx(0.1855, abs=1e-4)
    assert drifted.detail.startswith("the mean loss over 22 steps moved 40.5% (limit 18.5%")
    level = compare_losses([1.0, 1.0] + [1.0] * 20, [1.0, 1.0] + [1.03] * 20, tolerance=0.01)
    assert not level.ok and level.mean_limit == 0.02  # no variance at all: the 2% floor


def test_a_non_finite_loss_fails_whatever_the_tolerance() -> None:
    n = compare_losses([2.0, 1.0], [2.0, float("nan")], tolerance=1.0)
    assert not n.ok and "step 2" in n.detail
    assert not compare_losses([1.0], [float("inf")], tolerance=1.0).ok


def test_tolerance_is_the_loosest_of_the_numerics_changing_fixes() -> None:
    assert tolerance_for(["dataloader_workers"]) is None
    assert tolerance_for(["torch_compile"]) == 0.01
    assert tolerance_for(["channels_last", "amp"]) == 0.05


def report(*recs: tuple[str, float], dataloader_us: float = 0.0, step_us: float = 1000.0,
           timeline_us: float | None = None) -> Report:
    return Report(source=Source(paths=["t"], format="live"), device=None, steps=[],
                  summary=Summary(step_time_us=step_us, breakdown_us={"dataloader": dataloader_us},
                                  gpu_utilization=None, timeline_step_time_us=timeline_us),
                  recommendations=[Recommendation(id=i, title=f"do {i}", evidence={}, location=None,
                                                  estimated_speedup=e) for i, e in recs])


def settings(**kw: object) -> Settings:
    base = dict(loaders=[LoaderSite(file="t.py", line=3, num_workers=0, pin_memory=False, persistent_workers=False,
                                    batch_size=32, batches=100)],
                optimizers=[OptimizerSite(file="t.py", line=5, cls="SGD", foreach=None, fused=None,
                                          supports_fused=True)],
                zero_grad=[CallSite(file="t.py", line=9, value=False)],
                model=ModelInfo(cls="Net", module="__main__", parameters=10, dtype="float32", device="cpu",
                                conv=True, linear=True, compiled=False, autocast=False, channels_last=False))
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


def ids(plan) -> list[tuple[str, ...]]:
    return [c.fixes for c in plan.candidates]


def test_fixes_are_tried_in_the_walkthrough_order_whatever_their_estimates() -> None:
    rep = report(("set_to_none", 1.3), ("dataloader_workers", 2.0), ("torch_compile", 1.2), ("remove_sync", 1.2))
    plan = make_plan(rep, settings(), CPU, PlanOptions())
    # Input first, then the host's overhead, the layout, compilation last: each is measured on what was kept before
    # it, and the estimates (made on the program as it is) carry along.
    assert ids(plan) == [("dataloader_workers",), ("set_to_none",), ("channels_last",), ("torch_compile",)]
    assert [c.estimate for c in plan.candidates] == [2.0, 1.3, None, 1.2]
    assert [c.source for c in plan.candidates] == ["recommended", "recommended", "applicable", "recommended"]
    # remove_sync cannot be applied from outside: listed with the edit, not tried.
    assert [(n.id, n.reason) for n in plan.not_tried] == [("remove_sync", "needs a code change")]
    assert "do remove_sync" in plan.not_tried[0].suggestion and plan.not_tried[0].estimated_speedup == 1.2
    # This CPU has no bfloat16 in hardware: autocast is tried only when asked; with AVX512-BF16 or AMX, always.
    native = DeviceInfo(kind="cpu", name="CPU", cpu_cores=2, bf16=True, bf16_native=True)
    amp = next(c for c in make_plan(rep, settings(), native, PlanOptions()).candidates if c.fixes == ("amp",))
    assert amp.options == ({"amp": {"dtype": "bfloat16"}},)
    assert ids(make_plan(rep, settings(), CPU, PlanOptions(only=("amp",)))) == [("amp",)]


def test_a_code_change_asked_for_is_listed_with_its_edit() -> None:
    plan = make_plan(report(), settings(), CPU, PlanOptions(only=("remove_sync",)))
    assert ids(plan) == [] and [(n.id, n.reason) for n in plan.not_tried] == [("remove_sync", "needs a code change")]
    assert ".item()" in plan.not_tried[0].suggestion


def test_on_cuda_pinning_and_non_blocking_copies_are_one_rung() -> None:
    plan = make_plan(report(("non_blocking_copy", 1.2)), settings(), GPU, PlanOptions())
    assert ids(plan)[0] == ("pin_memory", "non_blocking_copy") and plan.candidates[0].estimate == 1.2
    assert ("cudnn_benchmark",) in ids(plan) and ("fused_optimizer",) in ids(plan)
    assert next(c for c in plan.candidates if c.fixes == ("fused_optimizer",)).options == (
        {"fused_optimizer": {"mode": "fused"}},)


def test_cuda_only_fixes_asked_for_on_a_cpu_say_why_not() -> None:
    plan = make_plan(report(), settings(), CPU, PlanOptions(only=("pin_memory", "cuda_graphs", "amp")))
    assert ids(plan) == [("amp",)]
    reasons = {n.id: n.reason for n in plan.not_tried}
    assert reasons == {"pin_memory": "applies to CUDA devices only", "cuda_graphs": "applies to CUDA devices only"}


def test_fixes_already_in_effect_are_not_tried_and_say_so() -> None:
    done = settings(zero_grad=[CallSite(file="t.py", line=9, value=True)],
                    model=ModelInfo(cls="Net", module="__main__", parameters=10, dtype="float32", device="cpu",
                                    conv=False, linear=True, compiled=True, autocast=True, channels_last=False))
    plan = make_plan(report(("set_to_none", 1.1), ("torch_compile", 1.4)), done, CPU,
                     PlanOptions(only=("set_to_none", "torch_compile", "amp", "channels_last")))
    assert ids(plan) == []
    reasons = {n.id: n.reason for n in plan.not_tried}
    assert reasons["set_to_none"].startswith("already in effect (zero_grad(set_to_none=True)")
    assert reasons["torch_compile"] == "already in effect (the model is compiled)"
    assert reasons["amp"] == "already in effect (the forward runs under autocast)"
    assert reasons["channels_last"] == "the model has no 2-d convolution"


def test_a_bigger_batch_needs_the_flag_and_fits_in_memory() -> None:
    asked = PlanOptions(only=("larger_batch",))
    plan = make_plan(report(("larger_batch", 1.3)), settings(), GPU, asked)
    assert plan.candidates == [] and "--allow-batch-change" in plan.not_tried[0].reason
    allowed = PlanOptions(only=("larger_batch",), allow_batch_change=True)
    # Peak 30 GiB of 80: 2x (60 GiB) fits under 90% of 80 (72 GiB), 4x (120 GiB) does not.
    plan = make_plan(report(), settings(peak_memory_bytes=30 * 2**30), GPU, allowed)
    assert plan.candidates[0].options == ({"larger_batch": {"factor": 2}},)
    plan = make_plan(report(), settings(peak_memory_bytes=50 * 2**30), GPU, allowed)
    assert plan.candidates == [] and plan.not_tried[0].reason == "no room in device memory for a bigger batch"
    # Up to what the memory allows, doubling: 3 GiB of 80 leaves room for 16x (48 GiB; 32x would be 96), the
    # published walk-through's 32 -> 512. An epoch of 100 batches of 32 keeps two batches up to 32x; of 20, to 8x.
    plan = make_plan(report(), settings(peak_memory_bytes=3 * 2**30), GPU, allowed)
    assert [o["larger_batch"]["factor"] for o in plan.candidates[0].options] == [2, 4, 8, 16]
    short = settings(peak_memory_bytes=3 * 2**30, loaders=[LoaderSite(
        file="t.py", line=3, num_workers=0, pin_memory=False, persistent_workers=False, batch_size=32, batches=20)])
    assert [o["larger_batch"]["factor"] for o in make_plan(report(), short, GPU, allowed).candidates[0].options] == [
        2, 4, 8]
    # A DataLoader whose sampler makes the batches (batch_size=None, as examples/pattern_launch_bound.py) has no
    # batch size to scale: said so, not blamed on memory. An epoch of 3 batches has no room for 2 of twice the size.
    sampled = settings(loaders=[LoaderSite(file="t.py", line=3, num_workers=0, pin_memory=False,
                                           persistent_workers=False, batch_size=None, batches=100)])
    reason = make_plan(report(), sampled, CPU, allowed).not_tried[0].reason
    assert reason.startswith("the DataLoader takes no batch_size")
    tiny = settings(loaders=[LoaderSite(file="t.py", line=3, num_workers=0, pin_memory=False,
                                        persistent_workers=False, batch_size=32, batches=3)])
    assert make_plan(report(), tiny, CPU, allowed).not_tried[0].reason == (
        "an epoch of 3 batches is too short for a bigger batch")
    # A CPU's memory is not known: x2 and x4.
    assert [o["larger_batch"]["factor"] for o in make_plan(report(), settings(), CPU, allowed).candidates[0].options
            ] == [2, 4]


def test_no_dataloader_no_loader_fixes() -> None:
    plan = make_plan(report(("dataloader_workers", 3.0)), settings(loaders=[]), CPU, PlanOptions())
    assert ("dataloader_workers",) not in ids(plan)
    assert plan.not_tried[0].reason == "the program builds no DataLoader"


def test_worker_counts_from_load_and_compute_time() -> None:
    # 30 ms of loading per batch, 10 ms of compute: 3 workers keep up, plus one spare = 4; then 8;
    # the core count (16) is also under 4 x 4 and the cap (32).
    rep = report(dataloader_us=30_000, step_us=40_000)
    assert worker_counts(rep, settings(), 16) == [4, 8, 16]
    # On 2 cores the cap is 2 x cores, unless the need itself is higher.
    assert worker_counts(rep, settings(), 2) == [2, 4]
    # Workers already there: try twice and four times as many, within the cap.
    four = settings(loaders=[LoaderSite(file=None, line=None, num_workers=4, pin_memory=False,
                                        persistent_workers=False, batch_size=8, batches=None)])
    assert worker_counts(rep, four, 16) == [8, 16]
    assert worker_counts(None, settings(), 2) == [2, 4]  # no diagnosis: 2, then 4
    # The breakdown belongs to the timeline's step: a live capture's headline (the unprofiled step, here 1.5 ms)
    # may be shorter than its loading alone (1.46 ms of a 1.9 ms replayed step): 1.46 / 0.44 -> 4 + 1 = 5, not
    # 1.46 / 0.04 -> 38 (a bench_tune run on 2 cores tried 53 workers). And never over 4 workers a core.
    live = report(dataloader_us=1_460, step_us=1_500, timeline_us=1_900)
    assert worker_counts(live, settings(), 2) == [2, 5]  # 5 is over 2 x 2 cores, allowed as the need; 10 is not
    assert worker_counts(report(dataloader_us=1_460, step_us=1_500), settings(), 2) == [2, 8]


def test_idle_workers_are_tried_as_none() -> None:
    """The diagnosis found the workers idle while the loop waits for them (suggested_workers 0): the one count tried
    is 0; without that finding, workers already there are only ever doubled."""
    two = settings(loaders=[LoaderSite(file="t.py", line=3, num_workers=2, pin_memory=False,
                                       persistent_workers=True, batch_size=16, batches=100, prefetch_factor=4)])
    idle = report(("dataloader_workers", 1.58), dataloader_us=697, step_us=1263)
    idle.recommendations[0].evidence["suggested_workers"] = 0
    assert worker_counts(idle, two, 2) == [0]
    assert worker_counts(report(("dataloader_workers", 1.2), dataloader_us=697, step_us=1263), two, 2) == [4]
    assert 0 not in worker_counts(idle, settings(), 2)  # no workers now: 0 is what there is


def test_workers_tf32_and_graphs_only_where_the_diagnosis_calls_for_them() -> None:
    plan = make_plan(report(), settings(), GPU, PlanOptions())
    assert not {("dataloader_workers",), ("tf32",), ("cuda_graphs",)} & set(ids(plan))
    asked = make_plan(report(), settings(), GPU, PlanOptions(only=("dataloader_workers", "tf32")))
    assert ids(asked) == [("dataloader_workers",), ("tf32",)]


def test_persistent_workers_only_where_a_trial_would_restart_workers() -> None:
    long_epoch = make_plan(report(), settings(), CPU, PlanOptions(only=("persistent_workers",), timed_steps=23))
    assert long_epoch.candidates == [] and "outlasts a trial" in long_epoch.not_tried[0].reason
    short = settings(loaders=[LoaderSite(file=None, line=None, num_workers=2, pin_memory=False,
                                         persistent_workers=False, batch_size=8, batches=10)])
    plan = make_plan(report(), short, CPU, PlanOptions(only=("persistent_workers",), timed_steps=23))
    assert ids(plan) == [("persistent_workers",)]


def test_the_walkthrough_ladder_planned_from_a_real_h100_diagnosis() -> None:
    """examples/cifar_resnet.py as written (workers 0), profiled on an H100 (tests/data/gpu_h100/cifar_rung1):
    the plan `stepscope tune` makes there for the walk-through's fixes."""
    from pathlib import Path

    from stepscope import analyze

    trace = Path(__file__).parent / "data" / "gpu_h100" / "cifar_rung1" / "trace.json.gz"
    if not trace.exists():
        pytest.skip(f"{trace} is not there")
    diagnosis = analyze(trace, batch_size=32)
    cifar = settings(model=ModelInfo(cls="ResNet18", module="__main__", parameters=11_181_642, dtype="float32",
                                     device="cuda:0", conv=True, linear=True, compiled=False, autocast=False,
                                     channels_last=False),
                     loaders=[LoaderSite(file="cifar_resnet.py", line=129, num_workers=0, pin_memory=False,
                                         persistent_workers=False, batch_size=32, batches=312)],
                     peak_memory_bytes=3 * 2**30)
    walkthrough = ("dataloader_workers", "pin_memory", "non_blocking_copy", "set_to_none", "amp", "torch_compile",
                   "larger_batch", "uint8_transfer")
    plan = make_plan(diagnosis, cifar, GPU, PlanOptions(only=walkthrough, allow_batch_change=True))
    assert ids(plan) == [("dataloader_workers",), ("pin_memory", "non_blocking_copy"), ("larger_batch",),
                         ("set_to_none",), ("amp",), ("torch_compile",)]
    workers = plan.candidates[0]
    # The plan carries the diagnosis' estimate, which is near what the rung measured plain on that H100
    # (tests/data/gpu_h100/plain_timings.txt: rung1 839.5 -> rung2, 8 workers, 1466.9 samples/s: 1.75x).
    estimate = next(r.estimated_speedup for r in diagnosis.recommendations if r.id == "dataloader_workers")
    assert workers.estimate == estimate and abs(estimate / (1466.9 / 839.5) - 1) <= 0.15
    assert len(workers.options) >= 2  # several worker counts, fewest first
    counts = [o["dataloader_workers"]["num_workers"] for o in workers.options]
    assert counts == sorted(counts) and counts[0] >= 2
    assert plan.candidates[4].options == ({"amp": {"dtype": "bfloat16"}},)  # an H100 has bfloat16
    # 3 GiB at batch 32 on 80 GiB: up to 16x, the walk-through's 512.
    assert [o["larger_batch"]["factor"] for o in plan.candidates[2].options] == [2, 4, 8, 16]
    # Its dataset normalises in __getitem__ (no torchvision): uint8 is a code change there (the script's --uint8).
    assert [n.id for n in plan.not_tried] == ["uint8_transfer"]
    assert plan.not_tried[0].reason.startswith("the dataset's transform does not end in torchvision's ToTensor")


def test_the_published_walkthrough_loop_gets_its_seven_steps_planned() -> None:
    """examples/walkthrough_resnet18.py as published (PIL, torchvision's ToTensor + Normalize, batch 32, no
    workers), profiled on an H100 (tests/data/gpu_h100_r5/walk_w0): the default plan with --allow-batch-change
    holds the steps made by hand (workers, pinned memory with non-blocking copies, batch up to 512, uint8 sent
    and normalised on the device, set_to_none, bfloat16 autocast), in that order, before compilation."""
    from pathlib import Path

    from stepscope import analyze

    trace = Path(__file__).parent / "data" / "gpu_h100_r5" / "walk_w0" / "trace_default.json.gz"
    diagnosis = analyze(trace, batch_size=32)
    peak = max(m.peak_allocated_bytes for m in diagnosis.memory)  # the GPU's, from the trace: 0.96 GB
    walk = settings(model=ModelInfo(cls="ResNet", module="torchvision.models.resnet", parameters=11_689_512,
                                    dtype="float32", device="cuda:0", conv=True, linear=True, compiled=False,
                                    autocast=False, channels_last=False),
                    loaders=[LoaderSite(file="walkthrough_resnet18.py", line=76, num_workers=0, pin_memory=False,
                                        persistent_workers=False, batch_size=32, batches=313)],
                    transforms=[TransformSite(file=None, chain=["Resize", "ToTensor", "Normalize"],
                                              ending="ToTensor+Normalize", mean=[0.4914, 0.4822, 0.4465],
                                              std=[0.2470, 0.2435, 0.2616])],
                    peak_memory_bytes=peak)
    plan = make_plan(diagnosis, walk, GPU, PlanOptions(allow_batch_change=True))
    steps = [("dataloader_workers",), ("pin_memory", "non_blocking_copy"), ("larger_batch",), ("uint8_transfer",),
             ("set_to_none",), ("amp",)]
    planned = ids(plan)
    assert all(s in planned for s in steps) and [planned.index(s) for s in steps] == sorted(
        planned.index(s) for s in steps)
    assert planned[-2:] == [("torch_compile",), ("cuda_graphs",)]  # compilation last (graphs: launch gaps seen)
    by = {c.fixes: c for c in plan.candidates}
    assert [o["larger_batch"]["factor"] for o in by[("larger_batch",)].options] == [2, 4, 8, 16]  # 32 -> 512
    assert by[("amp",)].options == ({"amp": {"dtype": "bfloat16"}},)
    # Both recommended by the diagnosis (input_bound, float32 batches copied): their estimates carry along.
    assert by[("dataloader_workers",)].source == by[("uint8_transfer",)].source == "recommended"


def with_meter(rep: Report, data_share: float, step_us: float = 1000.0) -> Report:
    """The report with a step meter that saw the main thread wait for data `data_share` of each step."""
    import msgspec

    from stepscope.model.meter import Meter, MeterPhase

    data = data_share * step_us
    meter = Meter(source="optimizer", steps_measured=30, basis="before the profiler", steps=8, step_us=step_us,
                  median_us=step_us, p10_us=step_us, p90_us=step_us,
                  phases=[MeterPhase(name="data", mean_us=data, share=data_share),
                          MeterPhase(name="other", mean_us=step_us - data, share=1 - data_share)], num_workers=1)
    return msgspec.structs.replace(rep, meter=meter)


def test_workers_are_tried_whenever_the_meter_saw_the_loop_wait_for_data() -> None:
    # The profiled run's diagnosis recommends nothing for the loader (under the profiler one worker kept up), but the
    # meter saw the plain run wait 30% of each step: workers are tried, from the meter's figures.
    waiting = with_meter(report(), 0.30)
    one_worker = settings(loaders=[LoaderSite(file="t.py", line=3, num_workers=1, pin_memory=False,
                                              persistent_workers=False, batch_size=32, batches=100)])
    plan = make_plan(waiting, one_worker, CPU, PlanOptions())
    workers = next(c for c in plan.candidates if c.fixes == ("dataloader_workers",))
    assert workers.source == "recommended" and workers.options[0] == {"dataloader_workers": {"num_workers": 2}}
    # Below the meter's threshold (5%), an unrecommended loader fix is not tried.
    assert ("dataloader_workers",) not in ids(make_plan(with_meter(report(), 0.02), one_worker, CPU, PlanOptions()))
    assert ("dataloader_workers",) not in ids(make_plan(report(), one_worker, CPU, PlanOptions()))
