"""The profiler's wait past the default --skip (capture/waiting.py): for what, how long, and how often it asks the
step meter (each question replays the meter's events: asked at every one of ten 1 ms steps it slowed them by ~10%)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepscope.capture.waiting import why_wait


class Steady:
    """A meter whose steps all take `step_ns` (its span runs from the first step's end), still warming up until
    `warming_until` steps have completed; it counts the questions."""

    def __init__(self, step_ns: int, warming_until: int = 0) -> None:
        self.step_ns, self.warming_until = step_ns, warming_until
        self.completed = self.asked = 0

    def span(self, source: str | None) -> tuple[int, int]:
        self.asked += 1
        steps = max(self.completed - 1, 0)
        return steps * self.step_ns, steps

    def warming(self, source: str | None) -> bool:
        self.asked += 1
        return self.completed < self.warming_until

    def profiler_started(self) -> None: ...

    def profiler_stopped(self) -> None: ...


def asked_at(meter: Steady, completed: int, skip: int) -> tuple[str, int] | None:
    meter.completed = completed
    return why_wait(meter, "optimizer", completed, skip)


def test_short_steps_are_asked_about_again_when_they_will_have_run_long_enough() -> None:
    # 4 ms steps, --skip 40: at step 10 the 9 after the first have run 36 ms; 64 ms more is 16 steps.
    meter = Steady(4_000_000)
    assert asked_at(meter, 10, 40) == ("short", 16)
    assert asked_at(meter, 26, 40) is None  # 25 x 4 ms = 100 ms, steady: start
    # 5 ms steps, --skip 10: 55 ms short after 10 would be 11 steps, but 2 x --skip is 10 steps away.
    assert asked_at(Steady(5_000_000), 10, 10) == ("short", 10)
    assert asked_at(Steady(5_000_000), 1, 10) == ("short", 1)  # no step after the first yet: ask at the next


def test_steps_long_enough_are_asked_about_their_warm_up_each_step() -> None:
    meter = Steady(20_000_000, warming_until=12)
    assert asked_at(meter, 10, 10) == ("warming", 1)
    assert asked_at(meter, 11, 10) == ("warming", 1)
    assert asked_at(meter, 12, 10) is None


def test_the_limit_and_no_skip_start_the_profiler_without_asking() -> None:
    meter = Steady(1_000_000, warming_until=1000)
    assert asked_at(meter, 20, 10) is None  # 2 x --skip
    assert asked_at(meter, 5, 0) is None
    assert meter.asked == 0


@pytest.mark.parametrize(("step_ns", "warming_until", "starts_at", "questions"), [
    (1_000_000, 0, 20, 1),  # asked once, at --skip: 1 ms steps will not run 0.1 s before the limit
    (4_000_000, 0, 20, 1),  # 36 ms at 10: 16 more steps wanted, the limit first
    (20_000_000, 13, 13, 8),  # 180 ms at 10; warming at 10, 11, 12 (span and warm-up each), steady at 13
])
def test_a_session_asks_the_meter_only_when_the_answer_can_have_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step_ns: int, warming_until: int, starts_at: int,
        questions: int) -> None:
    from stepscope.capture import session as session_mod
    from stepscope.capture.options import CaptureOptions
    from stepscope.capture.session import CaptureSession

    class Window:  # the profiler window, without a profiler: the session only needs it to start
        def __init__(self, spec: CaptureOptions, first_step: int, path: Path, timing_path: Path | None,
                     deferred: bool = False) -> None:
            self.first_step, self.timing, self.recording, self.recorded_pass_starting = first_step, None, False, False
            self.boundaries, self.length, self.waiting, self.running = 0, 1000, False, False

        def start(self) -> None: ...

        def step(self) -> bool:
            return False

    monkeypatch.setattr(session_mod, "ProfilerWindow", Window)
    session = CaptureSession(CaptureOptions(calibrate=False), tmp_path)  # the default --skip 10, settling
    meter = session.meter = Steady(step_ns, warming_until)
    for completed in range(1, 31):
        meter.completed = completed
        session.mark("optimizer")
    window = session.cycle.window
    assert window is not None and window.first_step == starts_at
    assert meter.asked == questions
