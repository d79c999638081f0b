"""What torch.profiler costs the host, per recorded event, on this machine and with these options.

The profiler's cost is not a fraction of the step: every operator it records pays a callback at its start
and end (more with input shapes, one more per allocation with memory profiling), and every CUDA runtime
call pays CUPTI's. A short loop of tiny operators is timed with the profiler off and on, in alternation, and
the difference per iteration is the cost per event of the kinds the loop makes:

- `op_ns`: one recorded operator (`x.mul_(y)` on a small CPU tensor: one `aten::mul_`, no allocation);
- `alloc_ns`: one allocator event (`torch.mul(x, y)`: the same operator plus an allocation and a free);
- `launch_ns`: one CUDA runtime call recorded by CUPTI, beyond its operator (`g.mul_(h)` on the GPU);
- `range_ns`: one `record_function` range (stepscope's line ranges), whole: it exists only in the window.

The replay (stepscope.replay) removes these costs event by event from the recorded window. The loops take a
fraction of a second; they run in the profiled process, after its window, so the host is the job's own.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

LOOP = 500  # iterations per timed loop: below CUDA's launch-queue depth (~1,000)
REPEATS = 7  # timed loops per variant; the quickest is kept: other work on the machine only ever adds time


@dataclass(frozen=True)
class ProfilerCost:
    """The profiler's host cost per recorded event, in ns, measured on the capturing machine."""

    op_ns: float
    alloc_ns: float
    launch_ns: float
    range_ns: float
    record_shapes: bool
    profile_memory: bool
    with_stack: bool
    cuda: bool
    seconds: float  # how long the calibration took
    plain_op_ns: float = 0.0  # the host's own speed, unprofiled: one tiny CPU operator
    plain_launch_ns: float = 0.0  # and one tiny operator launched on the GPU (0 without CUDA)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfilerCost:
        return cls(**{k: type(getattr(_ZERO, k))(data[k]) for k in cls.__dataclass_fields__ if k in data})


_ZERO = ProfilerCost(0.0, 0.0, 0.0, 0.0, False, False, False, False, 0.0)


def measure_profiler_cost(*, record_shapes: bool, profile_memory: bool, with_stack: bool = False,
                          cuda: bool | None = None) -> ProfilerCost:
    """Time the calibration loops plain and under a profiler with these options; never writes a trace."""
    import torch

    t_start = time.perf_counter()
    if cuda is None:
        cuda = bool(torch.cuda.is_available() and torch.cuda.is_initialized())
    x, y = torch.ones(16), torch.full((16,), 1.0)
    loops = {"op": lambda: x.mul_(y), "alloc": lambda: torch.mul(x, y), "range": _range_loop_body}
    if cuda:
        g, h = torch.ones(16, device="cuda"), torch.full((16,), 1.0, device="cuda")
        loops["launch"] = lambda: g.mul_(h)
    options = {"record_shapes": record_shapes, "profile_memory": profile_memory, "with_stack": with_stack}
    per_iter, plain = _profiled_minus_plain(loops, options, cuda)
    op = max(per_iter["op"], 0.0)
    return ProfilerCost(
        op_ns=op,
        alloc_ns=max((per_iter["alloc"] - op) / 2, 0.0) if profile_memory else 0.0,  # an allocation and a free
        launch_ns=max(per_iter.get("launch", op) - op, 0.0),
        range_ns=max(per_iter["range"], 0.0),
        record_shapes=record_shapes, profile_memory=profile_memory, with_stack=with_stack, cuda=cuda,
        seconds=time.perf_counter() - t_start,
        plain_op_ns=plain["op"], plain_launch_ns=plain.get("launch", 0.0),
    )


def _range_loop_body() -> None:
    import torch

    with torch.profiler.record_function("stepscope.calibration"):
        pass


def _profiled_minus_plain(loops: dict[str, Any], options: dict[str, bool],
                          cuda: bool) -> tuple[dict[str, float], dict[str, float]]:
    """Per loop, the quickest of REPEATS profiled minus the quickest plain, ns per iteration (plain for `range` is
    0), and the quickest plain."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    diffs: dict[str, list[float]] = {name: [] for name in loops}
    with profile(activities=activities, **options) as prof:
        for body in loops.values():  # warm the profiler's buffers and the callbacks
            _time_loop(body, LOOP // 4, cuda)
        prof_loops = {}
        for _ in range(REPEATS):
            for name, body in loops.items():
                prof_loops.setdefault(name, []).append(_time_loop(body, LOOP, cuda))
    del prof  # its events are not wanted: nothing is exported
    for _ in range(REPEATS):
        for name, body in loops.items():
            plain = 0.0 if name == "range" else _time_loop(body, LOOP, cuda)
            diffs[name].append(plain)
    torch.cuda.synchronize() if cuda else None
    plain = {name: min(diffs[name]) for name in loops}
    return {name: min(prof_loops[name]) - plain[name] for name in loops}, plain


def _time_loop(body: Any, n: int, cuda: bool) -> float:
    """Host ns per iteration of `body`. The device is drained before and after but not inside the timing: the
    host's cost is wanted, and LOOP launches stay within CUDA's launch queue, so the host never waits on it."""
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
