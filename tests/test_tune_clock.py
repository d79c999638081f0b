"""The step clock on a clock of our own (no sleeping, no timing): warm-up, windows of steps with their samples and
wall time, warm-up that waits for compiling to stop, windows set aside (a recompile in them, a first window
clearly slower than the next), the strongest step source, and a trial stopped for being far slower."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from stepscope.capture.session import StopProgram
from stepscope.tune.clock import StepClock

MS = 1_000_000


class Time:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


class Compiles:
    """Stands in for the compile watch: the test says when a compilation finished."""

    def __init__(self) -> None:
        self.events, self.active, self.total_ns = 0, False, 0

    def ready(self, force: bool = False) -> bool:
        return True

    def remove(self) -> None:
        pass


def drive(clock: StepClock, t: Time, step_ms: list[float], batch: int | None = 32,
          compile_at: frozenset[int] = frozenset()) -> int:
    """Mark optimizer steps of the given lengths (a batch yielded in each) until the clock stops the program;
    the number of boundaries marked."""
    marks = 0
    with pytest.raises(StopProgram):
        for i, ms in enumerate(step_ms):
            clock.add_samples(batch)
            t.ns += int(ms * MS)
            if i in compile_at:
                clock.compiles.events += 1
            marks += 1
            clock.mark("optimizer")
    return marks


def test_windows_after_the_warmup_count_samples_over_wall_time() -> None:
    t = Time()
    clock = StepClock(warmup=2, window_steps=3, window_seconds=0.0, windows=2, now=t)
    marks = drive(clock, t, [10.0] * 20)
    # Boundaries 1 and 2 warm up; the first window opens at the 2nd and closes at the 5th, the second at the 8th.
    assert marks == 8 and clock.completed == 8 and clock.stop_requested
    assert [(w.steps, w.samples, w.seconds, w.kind) for w in clock.windows] == [(3, 96.0, 0.03, "timed")] * 2
    assert clock.unit == "samples" and clock.warmup_s() == pytest.approx(0.01)  # from the 1st boundary to the 2nd
    assert clock.step_ns() == [10.0 * MS] * 6 and clock.warmup_ns() == [10.0 * MS]


def test_a_window_lasts_at_least_its_seconds_and_without_batches_counts_steps() -> None:
    t = Time()
    clock = StepClock(warmup=2, window_steps=2, window_seconds=0.05, windows=1, now=t)
    drive(clock, t, [10.0] * 20, batch=None)
    assert [(w.steps, w.samples, w.seconds) for w in clock.windows] == [(5, 5.0, 0.05)] and clock.unit == "steps"
    user = StepClock(warmup=2, window_steps=2, window_seconds=0.0, windows=1, now=t)
    user.set_batch_size(64, "user")  # the user's word on the batch: steps x 64, whatever the loader yields
    drive(user, t, [10.0] * 20, batch=None)
    assert user.windows[0].samples == 128.0 and user.unit == "samples"


def test_warmup_waits_for_compiling_to_stop_and_a_recompile_sets_its_window_aside() -> None:
    t = Time()
    clock = StepClock(warmup=2, window_steps=2, window_seconds=0.0, windows=2, now=t, compiles=Compiles())  # type: ignore[arg-type]
    # Steps 1-3 compile (the 3rd boundary is the 3rd step's end); step 9 recompiles (a last partial batch).
    steps = [900.0, 400.0, 300.0] + [10.0] * 5 + [500.0] + [10.0] * 10
    drive(clock, t, steps, compile_at=frozenset({0, 1, 2, 8}))
    # Boundary 3 compiled; 4 and 5 did not: the first window opens at boundary 5 (2 steps without compiling).
    assert clock.compile_steps == {1, 2, 3, 9}
    assert [(w.kind, w.steps) for w in clock.windows] == [("timed", 2), ("compiled", 2), ("timed", 2)]
    assert clock.windows[1].seconds == pytest.approx(0.51)  # the recompile: set aside, another window timed
    assert clock.warmup_s() == pytest.approx((400 + 300 + 10 + 10) / 1e3)


def test_a_first_window_clearly_slower_than_the_next_is_still_warm_up() -> None:
    t = Time()
    clock = StepClock(warmup=2, window_steps=4, window_seconds=0.0, windows=2, now=t)
    drive(clock, t, [20.0] * 6 + [10.0] * 20)  # the allocator, cuDNN's autotuning: slow, then steady
    kinds = [(w.kind, w.seconds) for w in clock.windows]
    # Two steps warm up; window 1 holds the other four 20 ms steps (0.08 s), window 2 four 10 ms ones (0.04 s):
    # half its throughput, so window 1 is warm-up after all and a third window is timed.
    assert kinds[0] == ("warm-up", pytest.approx(0.08)) and [k for k, _ in kinds[1:]] == ["timed", "timed"]
    assert [w.seconds for w in clock.timed()] == [pytest.approx(0.04), pytest.approx(0.04)]


def test_clock_follows_the_strongest_source() -> None:
    clock = StepClock(warmup=3, window_steps=100, window_seconds=0.0, windows=1)
    dropped: list[str] = []
    clock.on_leader = dropped.append
    clock.mark("forward")
    clock.mark("forward")
    clock.mark("optimizer")  # stronger: it leads, its count starts over, weaker hooks are dropped
    clock.mark("forward")
    assert clock.arbiter.leader == "optimizer" and clock.completed == 1 and dropped == ["forward", "optimizer"]


def test_clock_stops_a_trial_far_slower_than_its_reference_but_not_for_compiling() -> None:
    t = Time()
    clock = StepClock(warmup=10, window_steps=10, window_seconds=0.0, windows=1, abort_step_ns=1 * MS, now=t,
                      compiles=Compiles())  # type: ignore[arg-type]
    # 1 ms steps were expected. Compiling steps of 3 s do not count; steady 900 ms steps do, from 2 s of them.
    marks = drive(clock, t, [3000.0, 3000.0, 3000.0] + [900.0] * 10, compile_at=frozenset({0, 1, 2}))
    assert clock.aborted and marks == 6  # 3 compiling boundaries, then 900 + 900 + 900 ms > 2 s


def test_a_window_spans_two_bursts_of_a_loader_with_workers() -> None:
    t = Time()
    clock = StepClock(warmup=2, window_steps=3, window_seconds=0.0, windows=1, now=t)
    clock.burst_steps = lambda: 4 + 1  # four workers deliver up to four batches at once, then a wait
    drive(clock, t, [5.0, 5.0, 5.0, 5.0, 45.0] * 6)
    assert [w.steps for w in clock.windows] == [10]  # 2 x (4 + 1), not 3
