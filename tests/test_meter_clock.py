"""The step meter's arithmetic on hand-made clocks: exclusive phase time, steps cut at boundaries, the device's time
read a step later with no sync, and the headline's choice of steps (pipeline/meter.py)."""

from __future__ import annotations

import pytest

from stepscope.capture.meter.device import DeviceTimer
from stepscope.capture.meter.phases import BACKWARD, DATA, FORWARD, OPTIMIZER, OTHER, SYNC, PhaseClock, StepLog
from stepscope.model.meter import MeterRecord, MeterSteps
from stepscope.pipeline.meter import measured, meter_section


class FakeClock:
    def __init__(self) -> None:
        self.t = 1_000

    def __call__(self) -> int:
        return self.t

    def advance(self, ns: int) -> None:
        self.t += ns


def test_a_mark_replayed_later_sees_the_totals_of_its_own_moment() -> None:
    # The hooks only append events; the replay runs later. A mark must see the phases charged up to its own time,
    # not up to the replay's: here forward 40 and data 10 at the mark, though 1000 more ns of backward follow it.
    from stepscope.capture.meter.phases import ENTER, LEAVE, MARK, SHIFT

    clock = FakeClock()
    seen: list[tuple[int, int, list[int]]] = []
    pc = PhaseClock(clock, lambda source, t: seen.append((source, t, list(pc.totals))))
    start = clock.t
    for at, code in ((10, ENTER + DATA), (20, LEAVE + DATA), (20, ENTER + FORWARD), (60, LEAVE + FORWARD),
                     (60, MARK + 3), (60, ENTER + BACKWARD), (1060, LEAVE + BACKWARD)):
        pc.push((start + at) << SHIFT | code)
    clock.advance(5000)
    assert seen == []  # nothing is replayed before it is asked for
    pc.catch_up()
    assert [(source, t) for source, t, _ in seen] == [(3, start + 60)]
    totals = seen[0][2]
    assert totals[DATA] == 10 and totals[FORWARD] == 40 and totals[BACKWARD] == 0 and totals[OTHER] == 10
    assert pc.totals[BACKWARD] == 1000 and pc.events == []


def test_nested_phases_charge_the_innermost_and_add_up_to_the_wall() -> None:
    clock = FakeClock()
    pc = PhaseClock(clock)
    clock.advance(7)  # before any phase: other
    pc.enter(FORWARD)
    clock.advance(100)
    pc.enter(SYNC)  # loss.item() inside the forward
    clock.advance(30)
    pc.leave(SYNC)
    clock.advance(20)
    pc.leave(FORWARD)
    clock.advance(5)
    _, totals = pc.read()
    assert totals[FORWARD] == 120 and totals[SYNC] == 30
    assert sum(totals) == 7 + 100 + 30 + 20 + 5


def test_a_missed_leave_is_closed_with_its_outer_phase() -> None:
    clock = FakeClock()
    pc = PhaseClock(clock)
    pc.enter(OPTIMIZER)
    pc.enter(BACKWARD)  # an LBFGS closure whose backward raised: its leave never came
    clock.advance(40)
    pc.leave(OPTIMIZER)
    clock.advance(10)
    _, totals = pc.read()
    assert totals[BACKWARD] == 40 and totals[OPTIMIZER] == 0 and totals[-1] == 10  # later time is `other` again


def test_steps_are_the_totals_between_boundaries() -> None:
    clock = FakeClock()
    pc, log = PhaseClock(clock), StepLog()
    for data, fwd, bwd, opt, other in ((50, 10, 20, 5, 3), (40, 11, 19, 6, 4)):
        if log.count == 0 and log._last_t is None:
            log.start(clock.t, pc.read()[1])
        for phase, ns in ((DATA, data), (FORWARD, fwd), (BACKWARD, bwd), (OPTIMIZER, opt)):
            pc.enter(phase)
            clock.advance(ns)
            pc.leave(phase)
        clock.advance(other)
        log.boundary(*pc.read())
    assert log.column(1) == [88, 80]  # wall
    assert log.column(2) == [50, 40] and log.column(3) == [10, 11] and log.column(4) == [20, 19]
    assert log.column(5) == [5, 6] and log.column(6) == [0, 0]


class FakeEvent:
    """A CUDA event on a fake device whose clock the test moves: complete once the device passes its time."""

    def __init__(self, device: FakeDevice) -> None:
        self.device = device
        self.at: float | None = None

    def record(self) -> None:
        self.at = self.device.enqueue_marker()

    def query(self) -> bool:
        return self.at is not None and self.device.now >= self.at

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.query() and end.query(), "elapsed_time on an event not yet complete would sync"
        return (end.at - self.at) / 1e6  # ms


class FakeDevice:
    """Work is queued on it; a marker is reached when the work before it is done."""

    def __init__(self) -> None:
        self.now = 0.0
        self.queue_end = 0.0

    def enqueue(self, ns: float) -> None:
        self.queue_end = max(self.queue_end, self.now) + ns

    def enqueue_marker(self) -> float:
        return max(self.queue_end, self.now)


def test_device_steps_are_read_a_step_later_without_a_sync() -> None:
    device = FakeDevice()
    timer = DeviceTimer(lambda: FakeEvent(device))
    timer.boundary(0)
    work = [3e6, 5e6, 4e6, 6e6]
    for i, ns in enumerate(work, start=1):
        device.enqueue(ns)  # the host enqueues step i's kernels and runs ahead
        timer.boundary(i)
        assert i not in timer.device_ns  # the device has not reached this boundary yet: nothing read, no wait
        device.now += ns  # the device works through them
    timer.collect()
    assert [timer.device_ns[i] for i in range(1, 5)] == [3_000_000, 5_000_000, 4_000_000, 6_000_000]


def test_the_device_time_of_each_phase_is_read_from_its_marks_and_adds_up_to_the_step() -> None:
    # Per step the host enqueues: a copy (other) 1 ms, forward 3 ms, backward 5 ms, optimizer 2 ms on the device,
    # marking each phase as it enters it; the device runs behind and catches up only after the step.
    device = FakeDevice()
    timer = DeviceTimer(lambda: FakeEvent(device))
    timer.mark(FORWARD)  # before the first boundary: no step to charge, nothing recorded
    timer.boundary(0)
    plan = ((None, 1e6), (FORWARD, 3e6), (BACKWARD, 5e6), (OPTIMIZER, 2e6))
    for i in range(1, 4):
        for phase, ns in plan:
            if phase is not None:
                timer.mark(phase)
            device.enqueue(ns * i)  # step i's work is i times the plan: each step's figures are its own
        timer.boundary(i)
        assert i not in timer.device_ns  # not reached yet: no wait
        device.now = device.queue_end
    timer.collect()
    for i in range(1, 4):
        assert timer.phase_ns[i] == {OTHER: 1_000_000 * i, FORWARD: 3_000_000 * i, BACKWARD: 5_000_000 * i,
                                     OPTIMIZER: 2_000_000 * i}
        assert timer.device_ns[i] == 11_000_000 * i


def test_the_device_split_over_the_headline_steps_adds_up_to_the_device_step() -> None:
    walls = [900, *[50] * 11]
    device = [-1, *[100] * 11]
    rec = record(walls, [10] * 12, profiled=[10, 11], device=device)
    rec.steps.device_forward_ns = [-1, *[30] * 11]
    rec.steps.device_backward_ns = [-1, *[50] * 11]
    rec.steps.device_optimizer_ns = [-1, *[15] * 11]
    m = meter_section(rec)
    assert m is not None and m.device_phases is not None
    split = {p.name: p.mean_us for p in m.device_phases}
    assert split == pytest.approx({"forward": 0.03, "backward": 0.05, "optimizer": 0.015, "other": 0.005})
    assert sum(split.values()) == pytest.approx(m.device_step_us)
    # NVML's readings: two inside the headline's span (steps 2-9, host ns 950..1400), one in the profiled steps
    rec.device_busy = [[1000, 80.0], [1300, 60.0], [1500, 5.0]]
    m = meter_section(rec)
    assert m is not None and m.device_busy == pytest.approx(0.70)
    rec.steps.device_forward_ns = []  # a meter without the split (an older file): no split, the step still there
    m = meter_section(rec)
    assert m is not None and m.device_phases is None and m.device_step_us == pytest.approx(0.1)


def record(walls: list[int], data: list[int], profiled: list[int] | None, device: list[int] | None = None,
           batch: int | None = 8) -> MeterRecord:
    n = len(walls)
    end, t = [], 0
    for w in walls:
        t += w
        end.append(t)
    zeros = [0] * n
    fwd = [w // 4 for w in walls]
    steps = MeterSteps(end_ns=end, wall_ns=walls, data_ns=data, forward_ns=fwd, backward_ns=zeros, optimizer_ns=zeros,
                       sync_ns=zeros, device_ns=device or [])
    return MeterRecord(source="optimizer", batch_size=batch, steps=steps, profiled=profiled)


def test_the_headline_is_the_steps_before_the_profiler_less_the_start() -> None:
    # 10 steps before the profiler: step 0 (start-up) and the first fifth (steps 0-1) left out -> steps 2..9.
    walls = [900, 500, 120, 100, 100, 80, 100, 120, 100, 80, 400, 400, 400, 400, 110, 100, 100, 100]
    data = [0, 0, 60, 50, 50, 40, 50, 60, 50, 40, 0, 0, 0, 0, 0, 0, 0, 0]
    m = meter_section(record(walls, data, profiled=[10, 13]))
    assert m is not None and m.basis == "before the profiler" and m.steps == 8
    assert m.step_us == pytest.approx(sum(walls[2:10]) / 8 / 1e3)
    assert m.first_step_us == pytest.approx(0.9)
    by_name = {p.name: p.mean_us for p in m.phases}
    assert by_name["data"] == pytest.approx(sum(data[2:10]) / 8 / 1e3)
    assert sum(by_name.values()) == pytest.approx(m.step_us, abs=1e-3)  # the parts add up to the headline
    assert m.after_steps == 3 and m.after_step_us == pytest.approx(0.1)  # step 14 (settling) left out
    assert m.samples_per_s == pytest.approx(8 / (m.step_us / 1e6), rel=1e-4)
    found = measured(record(walls, data, profiled=[10, 13]))
    assert found is not None and found[0] == m
    ref = found[1]
    assert ref.step_us == m.step_us and ref.steps == 8 and ref.values_us == [w / 1e3 for w in walls[2:10]]


def test_a_process_that_runs_differently_after_the_profiler_is_flagged() -> None:
    before = [100_000] * 10
    slower = meter_section(record([*before, 400_000, 400_000, 100_000, 80_000, 80_000, 80_000, 80_000],
                                  [0] * 17, profiled=[10, 11]))
    same = meter_section(record([*before, 400_000, 400_000, 100_000, 101_000, 99_000, 100_000, 100_000],
                                [0] * 17, profiled=[10, 11]))
    assert slower is not None and slower.changed_after == pytest.approx(-0.2)
    assert same is not None and same.changed_after is None


def test_no_profiler_uses_every_step_but_the_first_and_too_few_says_so() -> None:
    m = meter_section(record([500, 100, 120, 80], [0] * 4, profiled=None))
    assert m is not None and m.basis == "no profiler ran" and m.steps == 3 and m.step_us == pytest.approx(0.1)
    assert meter_section(record([500, 100], [0, 0], profiled=None)) is None  # one usable step is not a figure


def test_a_device_timed_step_is_the_headline_and_the_host_phases_fit_in_it() -> None:
    walls = [900, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50]  # the host runs ahead of the device
    device = [-1, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100]
    m = meter_section(record(walls, [10] * 12, profiled=[10, 11], device=device))
    assert m is not None and m.device_step_us == pytest.approx(0.1) and m.step_us == pytest.approx(0.1)
    by_name = {p.name: p.mean_us for p in m.phases}
    assert by_name["data"] == pytest.approx(0.01) and sum(by_name.values()) == pytest.approx(0.1, abs=1e-3)


def test_the_replay_is_set_against_the_meter_phase_by_phase(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from builder import TraceBuilder
    from stepscope.analysis.facts import compute_facts
    from stepscope.model.meter import Meter, MeterPhase
    from stepscope.pipeline.meter import replay_phases
    from stepscope.trace.kineto import read_kineto

    b = TraceBuilder(device_name=None)
    for i, t0 in enumerate((0, 1000, 2000)):  # three CPU steps of 1000 µs: data 400, optimizer 100, the rest 500
        b.step(i, t0, t0 + 1000)
        b.dataloader(t0, t0 + 400)
        b.op("aten::mm", t0 + 400, t0 + 900)
        b.annotation("Optimizer.step#SGD.step", t0 + 900, t0 + 1000)
    facts = compute_facts(read_kineto(b.write(tmp_path / "t.json")))
    # The meter measured data 500, optimizer 100, the rest 600 (µs) per step: the replay's data is 20% short.
    meter = Meter(source="optimizer", steps_measured=20, basis="before the profiler", steps=8, step_us=1200.0,
                  median_us=1200.0, p10_us=1200.0, p90_us=1200.0,
                  phases=[MeterPhase(name="data", mean_us=500.0, share=0.4167),
                          MeterPhase(name="optimizer", mean_us=100.0, share=0.0833),
                          MeterPhase(name="forward", mean_us=300.0, share=0.25),
                          MeterPhase(name="other", mean_us=300.0, share=0.25)])
    phases = replay_phases(facts, meter)
    assert phases["data"] == {"replayed": 400.0, "measured": 500.0, "error": -0.2}
    assert phases["optimizer"] == {"replayed": 100.0, "measured": 100.0, "error": 0.0}
    assert phases["rest"]["replayed"] == 500.0 and phases["rest"]["measured"] == 600.0


def test_the_live_line_reads_the_latest_steps() -> None:
    from stepscope.capture.meter.live import status_text

    clock = FakeClock()
    pc, log = PhaseClock(clock), StepLog()
    log.start(clock.t, pc.read()[1])
    for _ in range(30):  # 10 ms steps: data 5 ms, forward 2 ms, other 3 ms
        pc.enter(DATA)
        clock.advance(5_000_000)
        pc.leave(DATA)
        pc.enter(FORWARD)
        clock.advance(2_000_000)
        pc.leave(FORWARD)
        clock.advance(3_000_000)
        log.boundary(*pc.read())
    assert status_text(log, 32) == "step 30 · 10.0 ms · 3,200 samples/s · data 50% fwd 20% other 30%"


def test_steps_still_warming_up_are_left_out_and_said() -> None:
    # Steps 2-9 (the headline's): 1.30, 1.25, 1.20, 1.15 ms then 1.00 x 4: the first half 23.75% slower, so it is
    # left out and the headline is the steady 1.00 ms.
    walls = [9_000_000, 2_000_000, 1_300_000, 1_250_000, 1_200_000, 1_150_000, *[1_000_000] * 4, *[3_000_000] * 4,
             *[1_000_000] * 4]
    m = meter_section(record(walls, [0] * len(walls), profiled=[10, 13]))
    assert m is not None and m.warming_left_out == 4 and m.steps == 4 and m.step_us == pytest.approx(1000.0)
    assert m.warming is None
    # Steps that keep getting faster to the end: halved while the first half is slower (8 -> 4), then too few.
    falling = [9_000_000, 2_000_000, *[2_000_000 - 100_000 * i for i in range(8)], *[3_000_000] * 4]
    m = meter_section(record(falling, [0] * len(falling), profiled=[10, 13]))
    assert m is not None and m.warming_left_out == 4 and m.steps == 4
    assert m.warming == pytest.approx((1.6 + 1.5) / (1.4 + 1.3) - 1, abs=1e-4)  # still falling: said
    steady = meter_section(record([9_000_000, *[1_000_000] * 9, *[3_000_000] * 4, *[1_000_000] * 4],
                                  [0] * 18, profiled=[10, 13]))
    assert steady is not None and steady.warming is None


def test_one_step_that_overshot_is_not_a_warming_up() -> None:
    # Steady 4 ms steps (sleeps) where one sleep woke 1.6 ms late on a busy machine: the headline's first half has
    # a mean 13% above its second, but its median is the steady 4 ms. Nothing is left out and nothing is said
    # (a mean of three steps read it as warming: tests/test_meter_run.py failed so in a fresh clone).
    walls = [30_000_000, *[4_000_000] * 3, 5_600_000, 4_000_000, 4_000_000, 4_100_000, *[4_000_000] * 2,
             *[9_000_000] * 4, *[4_000_000] * 4]
    m = meter_section(record(walls, [0] * len(walls), profiled=[10, 13]))
    assert m is not None and m.warming is None and m.warming_left_out == 0
    assert m.step_us == pytest.approx((4000 * 7 + 5600 + 4100) / 9, rel=0.01)


def test_a_noisy_settling_is_left_out_too() -> None:
    # The MLP workload's steps under `stepscope run` (µs, 2026-11-28): still settling over the first dozen, with
    # ~5% noise. The headline's steps are 3-14; their first half averages 1127.7 µs, the second 1045.2 µs (7.9%
    # slower, beyond the second half's spread, 5.0%): the steady step is the second half's mean.
    walls_us = [10887, 1841, 1362, 1260, 1148, 1071, 1109, 1139, 1039, 1000, 1157, 1054, 1016, 1002, 1042,
                *[2191] * 15, *[1000] * 4]
    walls = [w * 1000 for w in walls_us]
    m = meter_section(record(walls, [0] * len(walls), profiled=[15, 29]))
    assert m is not None and m.warming_left_out == 6 and m.steps == 6
    assert m.step_us == pytest.approx((1000 + 1157 + 1054 + 1016 + 1002 + 1042) / 6)


def test_a_settling_of_a_few_percent_beyond_the_noise_is_left_out() -> None:
    # The MLP workload's first 20 steps under `stepscope run` (µs, 17:47): the headline's steps 4-19 average 1068.75
    # µs in their first half and 1030.875 in their second (3.7% slower, beyond 3% and the second half's spread,
    # 3.1%): the second half is the steady step, and its own halves (1042.5, 1019.25: 2.3%) stop there.
    walls_us = [11177, 1595, 1271, 1134, 1073, 1119, 1120, 1078, 1015, 993, 1130, 1022, 1007, 1062, 1079, 1022, 998,
                1053, 1020, 1006, *[2191] * 14, *[1000] * 4]
    walls = [w * 1000 for w in walls_us]
    m = meter_section(record(walls, [0] * len(walls), profiled=[20, 33]))
    assert m is not None and m.warming_left_out == 8 and m.steps == 8
    assert m.step_us == pytest.approx((1007 + 1062 + 1079 + 1022 + 998 + 1053 + 1020 + 1006) / 8)


def test_a_one_off_stall_is_left_out_and_said_but_a_recurring_one_is_the_job() -> None:
    # The handoff workload's first full garbage collection after the imports lands in one step before the profiler:
    # 6.8 ms among ~1.1 ms steps. Planted: 9 headline steps (2-10), one of them 6.8 ms.
    from stepscope.pipeline.assemble import meter_notes

    walls = [15_000_000, 2_000_000, *[1_100_000] * 8, 6_800_000, 1_100_000, *[3_000_000] * 4, *[1_000_000] * 4]
    m = meter_section(record(walls, [0] * len(walls), profiled=[12, 15]))
    assert m is not None and m.steps == 9 and m.stalls_us == [6800.0]
    assert m.step_us == pytest.approx(1100.0)
    assert any("one-off stall" in note and "6.8 ms" in note for note in meter_notes(m))
    # Every fourth step stalls: that is the job's rhythm, kept in the mean.
    rhythm = [15_000_000, 2_000_000, *([1_100_000] * 3 + [6_800_000]) * 3, *[3_000_000] * 4, *[1_000_000] * 4]
    m = meter_section(record(rhythm, [0] * len(rhythm), profiled=[14, 17]))
    assert m is not None and m.stalls_us is None
    assert m.step_us > 2000
