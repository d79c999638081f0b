"""What torch.profiler costs the host, per recorded event, on this machine and with these options.

The profiler's cost is not a fraction of the step: every operator it records pays a callback at its start and
end (more with input shapes, one more per allocation with memory profiling), and every CUDA runtime call pays
CUPTI's. Short loops of small operators are timed with the profiler off and on (the quickest of REPEATS each:
other work on the machine only ever adds time), and the difference per iteration, over the events one iteration
records (counted in a short recorded run of the same loop), is the cost per event:

- `op_ns`: one recorded operator, from a tiny training step on the CPU (`F.linear(a, w, b).sum().backward()`):
  nested operators as a model's are (`aten::linear` > `aten::t` > `aten::transpose` ..., `aten::addmm`), with
  autograd's bookkeeping and the backward pass's nodes; a flat `x.mul_(y)` costs half as much per event;
- `launch_ns`: one CUDA runtime call recorded by CUPTI, beyond the operators around it (the same step on the GPU,
  whose backward runs on autograd's device thread as a model's does);
- `alloc_ns`: one allocator event (`torch.mul(x, y)` makes an allocation and a free), with memory profiling;
- `range_ns`: one `record_function` range (stepscope's line ranges), whole: it exists only in the window.

The cost of an event grows with the events the profiler has recorded before it (on a 2-core CPU: 0.5 µs per
operator in a fresh profiler, 2.3 µs after 200k events), so each loop records as many events as the window did
(`events`), from a fresh profiler, and the cost is their mean. The replay (stepscope.replay) removes these costs
event by event from the recorded timeline. The loops take a second or two; they run in the profiled process,
after its window, so the host is the job's own.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import time
from collections import Counter
from typing import Any

from stepscope.capture.release import release_results
from stepscope.model.calibration import ProfilerCost

LOOP = 300  # iterations per timed loop at least
REPEATS = 2  # timed loops per variant; the quickest is kept
MAX_EVENTS = 100_000  # a window of more events is calibrated at this many (seconds of loops and post-processing)
SCALED = ("op", "launch")
COUNTED = 20  # iterations recorded to count the events one iteration makes
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver", "Runtime")
# The loops' version: two hosts' speeds (plain_op_ns, plain_launch_ns) compare only when the same loops measured them.
LOOP_VERSION = "training-step/1"


def measure_profiler_cost(*, record_shapes: bool, profile_memory: bool, with_stack: bool = False,
                          cuda: bool | None = None, events: int = 0) -> ProfilerCost:
    """Time the calibration loops plain and under a profiler with these options, each loop recording about
    `events` events (the window's count; at least LOOP iterations)."""
    import torch
    import torch.nn.functional as F

    t_start = time.perf_counter()
    if cuda is None:
        cuda = bool(torch.cuda.is_available() and torch.cuda.is_initialized())
    a, w, b = torch.randn(4, 8), torch.randn(8, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    x, y = torch.ones(16), torch.full((16,), 1.0)
    loops: dict[str, Any] = {"op": lambda: F.linear(a, w, b).sum().backward(), "alloc": lambda: torch.mul(x, y),
                             "range": _range_loop_body}
    if cuda:
        ga = a.cuda()
        gw, gb = (t.detach().cuda().requires_grad_() for t in (w, b))
        loops["launch"] = lambda: F.linear(ga, gw, gb).sum().backward()
    options = {"record_shapes": record_shapes, "profile_memory": profile_memory, "with_stack": with_stack}
    counts = _events_per_iteration(loops, options, cuda)
    # The operator and launch loops record as many events as the window; an allocation or a range is rare beside
    # them in a window (memory is off in the timing pass, line ranges are in the recorded pass only).
    sizes = {name: max(LOOP, int(min(events, MAX_EVENTS) / max(sum(c.values()), 1.0))) if name in SCALED else LOOP
             for name, c in counts.items()}
    extra, plain = _profiled_minus_plain(loops, sizes, options, cuda)
    op = max(extra["op"], 0.0) / max(counts["op"]["op"], 1.0)
    alloc = 0.0
    if profile_memory and counts["alloc"]["memory"]:
        alloc = max(extra["alloc"] - op * counts["alloc"]["op"], 0.0) / counts["alloc"]["memory"]
    launch = 0.0
    if cuda and counts["launch"]["runtime"]:
        c = counts["launch"]
        launch = max(extra["launch"] - op * c["op"] - alloc * c["memory"], 0.0) / c["runtime"]
    return ProfilerCost(
        op_ns=op, alloc_ns=alloc, launch_ns=launch,
        range_ns=max(extra["range"], 0.0) / max(counts["range"]["range"], 1.0),
        record_shapes=record_shapes, profile_memory=profile_memory, with_stack=with_stack, cuda=cuda,
        seconds=time.perf_counter() - t_start,
        plain_op_ns=plain["op"] / max(counts["op"]["op"], 1.0),
        plain_launch_ns=plain["launch"] / max(counts["launch"]["runtime"], 1.0) if cuda else 0.0,
        events_per_iteration=counts, loop=LOOP_VERSION,
    )


def _range_loop_body() -> None:
    import torch

    with torch.profiler.record_function("stepscope.calibration"):
        pass


def _activities(cuda: bool) -> list[Any]:
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])


def _events_per_iteration(loops: dict[str, Any], options: dict[str, bool], cuda: bool) -> dict[str, dict[str, float]]:
    """Per loop, the operators, runtime calls, allocator events and ranges one iteration records: each loop is
    recorded for COUNTED iterations, exported and counted."""
    from torch.profiler import profile

    counts = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, body in loops.items():
            path = os.path.join(tmp, f"{name}.json")
            with profile(activities=_activities(cuda), **options) as prof:
                for _ in range(COUNTED):
                    body()
                if cuda:
                    import torch

                    torch.cuda.synchronize()
            prof.export_chrome_trace(path)
            release_results(prof)
            counts[name] = _count(path)
    return counts


def _count(path: str) -> dict[str, float]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        events = json.load(f).get("traceEvents", [])
    cats: Counter[str] = Counter()
    for e in events:
        name = str(e.get("name", ""))
        cat = str(e.get("cat", ""))
        if cat == "cpu_op":
            cats["op"] += 1
        elif cat in RUNTIME_CATEGORIES:
            cats["runtime"] += 1
        elif cat == "cpu_instant_event" and name == "[memory]":
            cats["memory"] += 1
        elif cat == "user_annotation" and name == "stepscope.calibration":
            cats["range"] += 1
    return {k: cats[k] / COUNTED for k in ("op", "runtime", "memory", "range")}


def _profiled_minus_plain(loops: dict[str, Any], sizes: dict[str, int], options: dict[str, bool],
                          cuda: bool) -> tuple[dict[str, float], dict[str, float]]:
    """Per loop, the quickest of REPEATS profiled runs minus the quickest plain, ns per iteration (plain for
    `range` is 0: the range exists only under the profiler), and the quickest plain. Each profiled run starts a
    fresh profiler and records `sizes[name]` iterations, as the window recorded its events; plain and profiled
    runs alternate, so that a busy spell of the machine does not fall on one side only."""
    from torch.profiler import profile

    profiled: dict[str, list[float]] = {name: [] for name in loops}
    plain: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(REPEATS):
        for name, body in loops.items():
            plain[name].append(0.0 if name == "range" else _time_loop(body, sizes[name], cuda))
            with profile(activities=_activities(cuda), **options) as prof:
                profiled[name].append(_time_loop(body, sizes[name], cuda))
            release_results(prof)
    quickest = {name: min(plain[name]) for name in loops}
    return {name: min(profiled[name]) - quickest[name] for name in loops}, quickest


def _time_loop(body: Any, n: int, cuda: bool) -> float:
    """Host ns per iteration of `body`. The device is drained before and after but not inside the timing: the
    host's cost is wanted (the loop's tiny kernels run faster than the host launches them)."""
    import torch

    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        body()
    elapsed = time.perf_counter_ns() - t0
    if cuda:
        torch.cuda.synchronize()
    return elapsed / n
