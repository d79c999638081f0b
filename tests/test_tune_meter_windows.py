"""tune's windows are the step meter's: the clock picks the steps, the meter's steps give their time and phases.
Checked on hand-made records (the index arithmetic, the fall-backs) and on a real trial whose loop sleeps a planted
time waiting for data and in the optimizer step."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from stepscope.model.meter import MeterRecord, MeterSteps
from stepscope.tune.clock import TimedWindow
from stepscope.tune.meter_windows import METER, data_share, metered

MS = 1_000_000


def record(walls: list[int], data: list[int], source: str = "optimizer", first_step: int = 0,
           device: list[int] | None = None) -> MeterRecord:
    zeros = [0] * len(walls)
    return MeterRecord(source=source, steps=MeterSteps(
        first_step=first_step, end_ns=list(range(len(walls))), wall_ns=walls, data_ns=data, forward_ns=zeros,
        backward_ns=zeros, optimizer_ns=zeros, sync_ns=zeros, device_ns=device or []))


def window(first: int, steps: int, seconds: float) -> TimedWindow:
    return TimedWindow(steps=steps, samples=steps * 8.0, seconds=seconds, start_s=0.0, first_stamp=0, first_step=first)


def test_a_window_is_the_sum_of_the_meters_steps_it_spans() -> None:
    # Steps 0..9 of 10, 11, ..., 19 ms; a window from boundary 4 to boundary 7 holds steps 4, 5, 6 (ending at
    # boundaries 5, 6, 7): 14 + 15 + 16 = 45 ms, of it data 3 ms each.
    walls = [(10 + i) * MS for i in range(10)]
    rec = record(walls, [3 * MS] * 10)
    m = metered(window(4, 3, 0.0452), rec, on_device=False)
    assert m.timer == METER and m.seconds == pytest.approx(0.045)
    assert m.phases_s["data"] == pytest.approx(0.009) and m.phases_s["other"] == pytest.approx(0.036)
    assert data_share([m.phases_s]) == pytest.approx(0.2)
    # A live file's record (first_step 3) holds the same steps at other positions.
    tail = record(walls[3:], [3 * MS] * 7, first_step=3)
    assert metered(window(4, 3, 0.0452), tail, on_device=False).seconds == pytest.approx(0.045)
    # The model's forwards: its first call starts the first step, so step k ends at forward boundary k + 2.
    fwd = record(walls, [3 * MS] * 10, source="forward")
    assert metered(window(4, 3, 0.0432), fwd, on_device=False).seconds == pytest.approx(0.013 + 0.014 + 0.015)


def test_where_the_meter_cannot_stand_the_clocks_window_stays() -> None:
    walls = [10 * MS] * 10
    rec = record(walls, [0] * 10)
    assert metered(window(4, 3, 0.060), rec, on_device=False).timer == "host clock"  # 30 vs 60 ms: not aligned
    assert metered(window(8, 5, 0.050), rec, on_device=False).timer == "host clock"  # past the meter's steps
    assert metered(window(4, 3, 0.030), None, on_device=False).seconds == 0.030
    # On a GPU: the device's steps when the meter has every one, else the synchronised window.
    on_gpu = record(walls, [0] * 10, device=[-1, *[20 * MS] * 9])
    m = metered(window(4, 3, 0.061), on_gpu, on_device=True)
    assert m.timer == METER and m.seconds == pytest.approx(0.060)
    late = record(walls, [0] * 10, device=[*[20 * MS] * 5, -1, -1, -1, -1, -1])
    assert metered(window(4, 3, 0.061), late, on_device=True).timer == "synchronised windows"


def test_a_trials_windows_carry_the_meters_phases(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    del torch
    from stepscope.tune.child import run_trial
    from stepscope.tune.wire import TrialSpec

    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import time, torch
        from torch.utils.data import DataLoader, Dataset

        class Slow(Dataset):
            def __len__(self): return 10_000
            def __getitem__(self, i):
                time.sleep(0.002)  # two items a batch: 4 ms waiting for data each step
                return torch.ones(2)

        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for x in DataLoader(Slow(), batch_size=2):
            model(x).sum().backward()
            time.sleep(0.004)  # the loop's own work: 4 ms of other
            opt.step()
    """))
    result = run_trial(TrialSpec(target=str(script), args=[], warmup=3, steps=12, min_seconds=0.0, windows=3))
    assert result.status == "measured" and result.timing == METER
    timed = [w for w in result.windows if w.kind == "timed"]
    assert len(timed) >= 2 and all(w.timer == METER for w in timed)
    for w in timed:
        per_step = {k: v / w.steps * 1e3 for k, v in w.phases_s.items()}  # ms
        assert 4.0 <= per_step["data"] <= 7.0 and 4.0 <= per_step["other"] <= 7.5
        assert sum(w.phases_s.values()) == pytest.approx(w.seconds, abs=1e-5)  # the window's time, in phases
    share = data_share([w.phases_s for w in timed])
    assert share is not None and 0.35 <= share <= 0.6


def test_a_wait_for_data_that_appears_on_a_kept_rung_gets_workers_tried(tmp_path: Path) -> None:
    from stepscope.capture.program import Program
    from stepscope.tune.judge import Rung
    from stepscope.tune.ladder import TuneOptions, Tuner
    from stepscope.tune.measured import Run, config_key
    from stepscope.tune.plan import Candidate
    from stepscope.tune.trial import ChildRun
    from stepscope.tune.wire import ChildResult, LoaderSite, Settings, WindowResult

    amp = {"amp": {"dtype": "bfloat16"}}
    loader = LoaderSite(file="train.py", line=9, num_workers=0, pin_memory=False, persistent_workers=False,
                        batch_size=32, batches=None)

    def tuner(data_s: float, **options: object) -> Tuner:
        t = Tuner(Program(str(tmp_path / "train.py"), ()), TuneOptions(**options), tmp_path)  # type: ignore[arg-type]
        # The kept rung (amp) measured: 1 s windows of which `data_s` waited for data.
        windows = [WindowResult(steps=10, samples=320.0, seconds=1.0, start_s=float(i),
                                phases_s={"data": data_s, "forward": 0.5, "other": 0.5 - data_s}) for i in range(3)]
        result = ChildResult(status="measured", exit_code=0, program_status="stopped", windows=windows)
        t.history = [Run(key=config_key(amp), child=ChildRun(result, 0, 5.0, tmp_path / "1.log", "", "measured"),
                         at=0.0, index=0)]
        t.current = Rung(1, amp, 10.0, 320.0, 1.5, 32, settings=Settings(loaders=[loader]))
        return t

    planned = [Candidate(("amp",), (amp,), 1.5, "recommended")]
    found = tuner(0.3)._phase_candidates(planned)  # 30% of the step waiting: workers tried, more than the 0 now
    assert [c.fixes for c in found] == [("dataloader_workers",)]
    assert found[0].options and all(o["dataloader_workers"]["num_workers"] > 0 for o in found[0].options)
    assert tuner(0.02)._phase_candidates(planned) == []  # 2%: below MIN_PHASE_SHARE
    with_workers = [*planned, Candidate(("dataloader_workers",), ({"dataloader_workers": {"num_workers": 2}},),
                                        None, "recommended")]
    assert tuner(0.3)._phase_candidates(with_workers) == []  # planned already
    assert tuner(0.3, skip_fixes=("dataloader_workers",))._phase_candidates(planned) == []  # the user said no
