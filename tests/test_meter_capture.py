"""The step meter on real torch, in this process: steps built from sleeps of known length in each phase (the
DataLoader, the model's forward, the backward pass, the optimizer step, a blocking call, the loop's own work), a
loader whose worker waits, and its hooks taken off again."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from stepscope.capture.meter import StepMeter  # noqa: E402
from stepscope.model.meter import meter_from_json  # noqa: E402
from stepscope.model.runfolder import METER  # noqa: E402

pytestmark = pytest.mark.usefixtures("hook_set")  # each test with the C hooks and with the Python ones

MS = 1_000_000
DATA_S, FWD_S, BWD_S, OPT_S, SYNC_S, OTHER_S = 0.012, 0.008, 0.010, 0.004, 0.006, 0.005


class SleepyData(torch.utils.data.Dataset):
    def __init__(self, n: int, per_item_s: float) -> None:
        self.n, self.per_item_s = n, per_item_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.per_item_s)
        return torch.ones(4)


class SleepyBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def]
        return x * 1.0

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        time.sleep(BWD_S)
        return grad


class SleepyModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(FWD_S)
        return SleepyBackward.apply(self.lin(x))


class SleepySGD(torch.optim.SGD):
    def step(self, closure=None):  # type: ignore[no-untyped-def,override]
        time.sleep(OPT_S)
        return super().step(closure)


def run_steps(meter_folder: Path, loader: torch.utils.data.DataLoader, steps: int, *, syncs: bool = False,
              sleepy_item: bool = False, monkeypatch: pytest.MonkeyPatch | None = None,
              chosen: str | None = None) -> StepMeter:
    model = SleepyModel()
    opt = SleepySGD(model.parameters(), lr=0.01)
    if sleepy_item:
        assert monkeypatch is not None
        original = torch.Tensor.item

        def slow_item(self):  # type: ignore[no-untyped-def]
            time.sleep(SYNC_S)  # a planted device sync: the call blocks this long
            return original(self)

        monkeypatch.setattr(torch.Tensor, "item", slow_item)
    meter = StepMeter(meter_folder, syncs=syncs, live=False, chosen=chosen).install()
    try:
        for i, x in enumerate(loader):
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sleepy_item:
                loss.item()
            time.sleep(OTHER_S)
            if i + 1 >= steps:
                break
    finally:
        meter.remove()
    return meter


def phase_means(meter: StepMeter, skip: int = 1) -> dict[str, float]:
    rec = meter.record("optimizer")
    st = rec.steps
    n = len(st.wall_ns) - skip
    out = {name: sum(getattr(st, f"{name}_ns")[skip:]) / n / MS
           for name in ("wall", "data", "forward", "backward", "optimizer", "sync")}
    out["other"] = out["wall"] - sum(v for k, v in out.items() if k != "wall")
    return out


def test_hand_built_steps_are_measured_phase_by_phase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loader = torch.utils.data.DataLoader(SleepyData(64, DATA_S / 2), batch_size=2)  # two items per batch
    meter = run_steps(tmp_path, loader, 8, syncs=True, sleepy_item=True, monkeypatch=monkeypatch)
    m = phase_means(meter)
    planted = {"data": DATA_S, "forward": FWD_S, "backward": BWD_S, "optimizer": OPT_S, "sync": SYNC_S,
               "other": OTHER_S}
    for name, seconds in planted.items():
        # A sleep is never shorter than asked; on a busy 2-core machine it can overshoot by a few ms.
        assert seconds * 1e3 - 0.2 <= m[name] <= seconds * 1e3 + 4.0, (name, m[name])
    rec = meter.record("optimizer")
    for i, wall in enumerate(rec.steps.wall_ns):  # each step's phases never exceed its wall time
        named = sum(getattr(rec.steps, f"{p}_ns")[i] for p in ("data", "forward", "backward", "optimizer", "sync"))
        assert named <= wall
    assert len(rec.steps.wall_ns) == 8  # one per optimizer step, the first from the first fetch
    # The first step has its phases too (it showed as 100% 'other', all its phases 0): its planted data wait at least
    first = {p: getattr(rec.steps, f"{p}_ns")[0] / MS for p in ("data", "forward", "backward", "optimizer")}
    assert first["data"] >= DATA_S * 1e3 - 0.2 and first["forward"] >= FWD_S * 1e3 - 0.2, first


def test_each_source_counts_its_own_steps_until_the_strongest_leads(tmp_path: Path) -> None:
    loader = torch.utils.data.DataLoader(SleepyData(16, 0.001), batch_size=2)
    meter = run_steps(tmp_path, loader, 5)
    assert meter.leading == "optimizer" and meter.logs["optimizer"].count == 5
    # meter.json says which hook set measured: the one this test's hook_set chose
    want = "Python" if os.environ.get("STEPSCOPE_PURE_PYTHON_HOOKS") == "1" else "C"
    assert meter.record("optimizer").hooks == want
    # Weaker sources are kept until the optimizer has led a step (then they would never be reported): the first
    # backward pass, which ended before the first optimizer step; no forward's step (the first forward starts a step,
    # it ends none; the second's call, which would end it, comes after the optimizer led).
    assert meter.logs["backward"].count == 1 and meter.logs["forward"].count == 0
    # A source the user chose (--step-on forward) is kept whatever leads.
    chosen = run_steps(tmp_path, torch.utils.data.DataLoader(SleepyData(16, 0.001), batch_size=2), 5,
                       chosen="forward")
    assert chosen.logs["forward"].count == 4 and chosen.record("forward").source == "forward"


def test_a_loader_whose_worker_waits_is_seen_from_the_workers_side(tmp_path: Path) -> None:
    per_item = 0.004
    loader = torch.utils.data.DataLoader(SleepyData(200, per_item), batch_size=4, num_workers=1,
                                         multiprocessing_context="fork")
    meter = run_steps(tmp_path, loader, 10)
    rec = meter.record("optimizer")
    assert rec.num_workers == 1
    w = rec.workers
    assert w is not None and w.workers == 1 and len(w.ready_ns) >= 10
    batch_ms = [(r - s) / MS for s, r in zip(w.start_ns, w.ready_ns, strict=True)]
    assert min(batch_ms) >= 4 * per_item * 1e3 - 0.1  # four sleeping items per batch
    cpu_ms = sum(w.cpu_ns) / len(w.cpu_ns) / MS
    assert cpu_ms < 0.5 * min(batch_ms)  # sleeping is waiting, not CPU work
    # The main thread's work per step (~35 ms of planted phases) outruns one worker (~16 ms a batch): little wait.
    # The loader can only keep up because the loop is slow; the meter's figures say so.
    assert not (tmp_path / ".meter-workers.bin").exists()  # read and removed


def test_the_hooks_come_off(tmp_path: Path) -> None:
    from torch.optim import optimizer as optim_module
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    before = (_BaseDataLoaderIter.__next__, torch.autograd.backward, "item" in torch.Tensor.__dict__,
              len(optim_module._global_optimizer_pre_hooks), len(optim_module._global_optimizer_post_hooks),
              len(torch.nn.modules.module._global_forward_pre_hooks))
    loader = torch.utils.data.DataLoader(SleepyData(8, 0.0), batch_size=2)
    run_steps(tmp_path, loader, 3, syncs=True)
    after = (_BaseDataLoaderIter.__next__, torch.autograd.backward, "item" in torch.Tensor.__dict__,
             len(optim_module._global_optimizer_pre_hooks), len(optim_module._global_optimizer_post_hooks),
             len(torch.nn.modules.module._global_forward_pre_hooks))
    assert after == before
    assert SleepyModel.__dict__["forward"].__qualname__ == "SleepyModel.forward"  # the class put back


def test_the_record_round_trips_through_meter_json(tmp_path: Path) -> None:
    loader = torch.utils.data.DataLoader(SleepyData(16, 0.0), batch_size=2)
    meter = run_steps(tmp_path, loader, 4)
    record = meter.finish("optimizer")
    read = meter_from_json((tmp_path / METER).read_bytes())
    assert read == record and read.done and read.steps.wall_ns == record.steps.wall_ns
    if Path("/proc/stat").is_file():  # the machine's and the process's CPU time: at the start and at the end at least
        assert len(read.host_cpu) >= 2
        first, last = read.host_cpu[0], read.host_cpu[-1]
        assert last[0] > first[0] and last[1] >= first[1] and last[2] >= first[2]


def test_a_subclass_calling_super_step_is_one_optimizer_step(tmp_path: Path) -> None:
    # torch hooks every optimizer class's own step once an instance of it exists: SleepySGD.step -> SGD.step fires
    # the global step hooks twice, nested. One optimizer step all the same.
    torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)  # SGD.step hooked, as any program using SGD does
    loader = torch.utils.data.DataLoader(SleepyData(16, 0.0), batch_size=2)
    meter = run_steps(tmp_path, loader, 4)
    assert meter.logs["optimizer"].count == 4


def test_the_hooks_mark_each_phase_on_the_device(tmp_path: Path) -> None:
    # A fake device (tests/test_meter_clock.py) given work from inside each phase: the copy before the forward
    # 1 ms, the forward 3 ms, the backward 5 ms, the optimizer 2 ms; the meter's split must be that plan.
    from stepscope.capture.meter.device import DeviceTimer
    from test_meter_clock import FakeDevice, FakeEvent

    device = FakeDevice()

    class Enqueues(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            return x * 1.0

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            device.enqueue(5 * MS)
            return grad

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            device.enqueue(3 * MS)
            return Enqueues.apply(self.lin(x))

    class SGD(torch.optim.SGD):
        def step(self, closure=None):  # type: ignore[no-untyped-def,override]
            device.enqueue(2 * MS)
            return super().step(closure)

    model = Model()
    opt = SGD(model.parameters(), lr=0.01)
    meter = StepMeter(tmp_path, live=False, device=DeviceTimer(lambda: FakeEvent(device))).install()
    try:
        for i, x in enumerate(torch.utils.data.DataLoader(SleepyData(32, 0.0), batch_size=2)):
            device.enqueue(1 * MS)  # the batch's copy
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            device.now = device.queue_end  # the device catches up after the step
            if i >= 7:
                break
    finally:
        meter.remove()
    st = meter.record("optimizer").steps
    known = [i for i, d in enumerate(st.device_ns) if d >= 0]
    assert len(known) >= 5
    for i in known[1:]:  # the first timed step began before the timer's first boundary: its copy is not in it
        assert st.device_ns[i] == 11 * MS
        assert (st.device_forward_ns[i], st.device_backward_ns[i], st.device_optimizer_ns[i]) == (3 * MS, 5 * MS,
                                                                                                  2 * MS)
