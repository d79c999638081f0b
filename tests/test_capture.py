"""Capture's parts alone: batch sizes, the step arbiter, step timing, the trace export's repair, the run
folder, and telemetry (CPU from /proc/stat, NVML through a stand-in module)."""

from __future__ import annotations

import gzip
import time
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from stepscope.capture.arbiter import Mark, StepArbiter
from stepscope.capture.batch import batch_bytes_of, batch_size_of
from stepscope.capture.cpu import _busy_percent, _read_proc_stat
from stepscope.capture.export import export_trace, gzip_utf8
from stepscope.capture.nvml import NvmlSampler
from stepscope.capture.overhead import StepTimes
from stepscope.capture.runfolder import new_run_folder
from stepscope.capture.telemetry import Telemetry
from stepscope.errors import StepscopeError


def test_batch_size_walks_tuples_lists_and_mappings() -> None:
    images = np.zeros((32, 3, 8, 8))
    assert batch_size_of(images) == 32
    assert batch_size_of((images, np.zeros(32))) == 32
    assert batch_size_of([["text"], {"input_ids": np.zeros((7, 128)), "labels": np.zeros(7)}]) == 7
    assert batch_size_of(OrderedDict(meta="x", pixels=[np.zeros((5, 2))])) == 5
    assert batch_size_of(("a", 3, None)) is None
    assert batch_size_of(np.float32(1.0)) is None  # a scalar has no first dimension
    assert batch_size_of([[[[[np.zeros((9, 1))]]]]]) is None  # deeper than a batch nests


def test_batch_bytes_add_every_tensor_it_nests() -> None:
    import torch

    # 64 x 131072 float32 (4 bytes each) and 64 int64 labels (8 bytes each): 33,554,432 + 512
    assert batch_bytes_of((torch.zeros(64, 131072), torch.zeros(64, dtype=torch.int64))) == 33_554_944
    assert batch_bytes_of({"ids": np.zeros((7, 128), dtype=np.int32), "meta": ["x"], "n": 3}) == 7 * 128 * 4
    assert batch_bytes_of(("a", 3, None)) == 0
    assert batch_bytes_of([[[[[np.zeros(9)]]]]]) == 0  # deeper than a batch nests


def test_arbiter_keeps_the_strongest_source_until_locked() -> None:
    a = StepArbiter()
    assert a.mark("dataloader") is Mark.SWITCH and a.completed == 1
    assert a.mark("forward") is Mark.IGNORE  # weaker
    assert a.mark("backward") is Mark.SWITCH and a.completed == 1  # stronger: its count starts over
    assert a.mark("optimizer") is Mark.SWITCH and a.completed == 1
    assert a.mark("backward") is Mark.IGNORE and a.mark("dataloader") is Mark.IGNORE
    assert a.mark("optimizer") is Mark.STEP and a.completed == 2
    a.lock()
    assert a.mark("manual") is Mark.IGNORE and a.leader == "optimizer"  # too late: profiling has begun
    a.reopen()  # after a provisional window, a stronger source may take over (its count starts over)
    assert a.mark("manual") is Mark.SWITCH and a.completed == 1


def test_a_chosen_source_is_the_only_one_counted() -> None:
    a = StepArbiter("forward")
    assert a.mark("optimizer") is Mark.IGNORE and a.mark("backward") is Mark.IGNORE
    assert a.mark("forward") is Mark.SWITCH and a.final()
    marker = StepArbiter("marker")
    assert marker.mark("optimizer") is Mark.IGNORE and marker.mark("lightning") is Mark.SWITCH
    assert not StepArbiter().final()  # nothing leads yet: not a training step


def test_step_times_give_the_unprofiled_reference() -> None:
    t = StepTimes()
    clock = 0
    for phase, duration in [("unprofiled", 50), *[("unprofiled", d) for d in (10, 12, 11)], ("warmup", 30),
                            *[("recorded", 12)] * 3]:
        t.begin_step(clock)
        clock += duration
        t.end_step(clock, phase)
    ref = t.reference()  # no CUDA here: the host clock, median of the unprofiled steps
    assert ref is not None and ref.method == "host clock" and ref.steps == 3  # the first (start-up) left out
    # noise: stats.step_noise, (p90 - p10) / 2 over the median: 10, 11, 12 give p10 10.2, p90 11.8 (interpolated)
    assert ref.step_ns == 11 and ref.noise == pytest.approx((11.8 - 10.2) / 2 / 11)
    assert t.recorded_ns() == 12
    assert StepTimes().reference() is None


def test_synchronized_slices_make_the_reference_when_there_are_any() -> None:
    from stepscope.capture.overhead import Slice

    t = StepTimes(slices=[Slice(4, 40_000, True), Slice(5, 60_000, True), Slice(3, 1, False)])
    ref = t.reference()
    assert ref is not None and ref.method == "synchronized slices" and ref.steps == 9
    assert ref.step_ns == pytest.approx(100_000 / 9) and ref.values_ns == (10_000, 12_000)
    assert ref.noise == pytest.approx((11_800 - 10_200) / 2 / 11_000)  # stats.step_noise of the two slices' steps


def test_export_repairs_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    good = b'{"traceEvents": [{"name": "caf\xc3\xa9"}]}\n'
    src = tmp_path / "good.json"
    src.write_bytes(good)
    assert gzip_utf8(src, tmp_path / "good.json.gz") is False
    assert gzip.decompress((tmp_path / "good.json.gz").read_bytes()) == good
    # A stack string cut in the middle of a character, as the profiler writes with with_stack=True.
    src.write_bytes(b'{"traceEvents": [{"name": "ProfilerStep#3"}, {"name": "f\xe2\x82 (x.py:1)"}]}\n')
    assert gzip_utf8(src, tmp_path / "bad.json.gz", rename=(b'"ProfilerStep#3"', b'"ProfilerStep#3 (cut short)"'))
    text = gzip.decompress((tmp_path / "bad.json.gz").read_bytes()).decode("utf-8")
    assert "\ufffd (x.py:1)" in text and '"ProfilerStep#3 (cut short)"' in text


def test_own_range_names_survive_kinetos_unescaped_json_in_either_layout() -> None:
    """Kineto pastes range names into its JSON as they are. torch 2.13 writes one field per line; torch 2.11
    (seen on an H100) writes `"ph": "X", "cat": "cpu_op", "name": "...", "pid": 1, "tid": 1,` on one line,
    which broke the old line-based re-escape. Names made by stepscope must parse in both, and read back."""
    import json

    from stepscope.trace.source_annotations import (
        line_annotation,
        module_annotation,
        parse_line_annotation,
        parse_module_annotation,
    )

    code = 'x = d["k"] + "\\d" | 100% \t done'
    line = line_annotation('my "odd" | dir/t.py', 3, "f", code)
    module = module_annotation('model.blocks["0"]')
    for name in (line, module):
        one_per_line = '{"traceEvents": [{\n"ph": "X",\n"name": "' + name + '",\n"pid": 1\n}]}'
        several = ('{"traceEvents": [{\n"ph": "X", "cat": "cpu_op", "name": "' + name
                   + '", "pid": 1, "tid": 1,\n"ts": 1}]}')
        for text in (one_per_line, several):
            assert json.loads(text)["traceEvents"][0]["name"] == name
    parsed = parse_line_annotation(line)
    assert parsed is not None and (parsed.file, parsed.line, parsed.function, parsed.code) == (
        'my "odd" | dir/t.py', 3, "f", code.strip())
    assert parse_module_annotation(module) == 'model.blocks["0"]'


def test_export_keeps_a_file_the_profiler_wrote_before_failing(tmp_path: Path) -> None:
    class Profiler:
        def __init__(self, write: bool) -> None:
            self.write = write

        def export_chrome_trace(self, path: str) -> None:
            if self.write:
                Path(path).write_bytes(b'{"traceEvents": [{"name": "\xff"}]}')
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    kept = export_trace(Profiler(write=True), tmp_path / "a.json.gz")
    assert kept.path == tmp_path / "a.json.gz" and len(kept.notes) == 2
    assert "UnicodeDecodeError" in kept.notes[0] and "not UTF-8" in kept.notes[1]
    lost = export_trace(Profiler(write=False), tmp_path / "b.json.gz")
    assert lost.path is None and "UnicodeDecodeError" in (lost.error or "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json.gz"]  # no partial files left behind


def test_run_folder_names_and_never_overwrites(tmp_path: Path) -> None:
    now = time.mktime((2025, 3, 4, 5, 6, 7, 0, 0, -1))
    first = new_run_folder("my train", base=tmp_path, now=now)
    assert first.name == "my-train-20250304-050607" and first.is_dir()
    assert new_run_folder("my train", base=tmp_path, now=now).name == "my-train-20250304-050607-2"
    assert new_run_folder("x", out=tmp_path / "new").is_dir()
    (first / "report.json").write_text("{}")
    with pytest.raises(StepscopeError, match="already exists"):
        new_run_folder("x", out=first)


def test_cpu_busy_from_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\ncpu1 5 0 5 40 0 0 0 0 0 0\n")
    before = _read_proc_stat(stat)
    stat.write_text("cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 35 0 5 50 10 0 0 0 0 0\ncpu1 5 0 5 140 0 0 0 0 0 0\n")
    after = _read_proc_stat(stat)
    assert [_busy_percent(a, b) for a, b in zip(before, after, strict=True)] == [60.0, 0.0]


class FakeNvml:
    """The pynvml calls stepscope makes, for one GPU drawing 300 W."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: return 1
    def nvmlDeviceGetHandleByIndex(self, i: int) -> str: return f"gpu{i}"
    def nvmlDeviceGetName(self, h: str) -> bytes: return b"Fake GPU"

    def nvmlDeviceGetUtilizationRates(self, h: str) -> SimpleNamespace:
        return SimpleNamespace(gpu=80, memory=30)

    def nvmlDeviceGetMemoryInfo(self, h: str) -> SimpleNamespace:
        return SimpleNamespace(used=2 * 2**30, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h: str) -> int: return 300_000

    def nvmlDeviceGetClockInfo(self, h: str, kind: int) -> int:
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTotalEnergyConsumption(self, h: str) -> int:
        return int(300_000 * (time.perf_counter() - self.t0))


def test_telemetry_with_a_gpu() -> None:
    tele = Telemetry(interval_s=0.02, nvml=NvmlSampler(loader=FakeNvml)).start()
    time.sleep(0.05)
    tele.window_started()
    time.sleep(0.2)
    tele.window_ended()
    report = tele.stop()
    assert report.gpus == ["Fake GPU"] and report.notes == []
    w = report.window
    assert w is not None and w.samples >= 3
    g = w.gpu[0]
    assert (g.util_mean, g.power_mean_w, g.sm_clock_mean_mhz, g.mem_used_max_bytes) == (80, 300, 1980, 2 * 2**30)
    assert g.energy_j == pytest.approx(300 * (w.end_s - w.start_s), rel=0.1)  # 300 W over the window
    assert report.samples[-1].gpu[0].mem_clock_mhz == 2619


def test_telemetry_without_a_gpu_says_why() -> None:
    def missing() -> None:
        raise ImportError("No module named 'pynvml'")

    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise RuntimeError("NVML Shared Library Not Found")

    assert NvmlSampler(loader=missing).note == "no GPU telemetry: nvidia-ml-py is not installed"
    tele = Telemetry(interval_s=0.01, nvml=NvmlSampler(loader=NoDriver)).start()
    report = tele.stop()
    assert report.notes == ["no GPU telemetry: NVML found no NVIDIA driver"] and report.gpus == []
    assert report.window is None and report.samples and report.cpu_cores


def test_the_api_and_the_run_verb_import_without_torch() -> None:
    import subprocess
    import sys

    code = "import sys, stepscope.api, stepscope.commands.run, stepscope.capture; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def test_physical_cores_and_native_bf16_are_read_from_the_system(tmp_path: Path) -> None:
    from stepscope.capture.settings import available_cores, cpu_bf16_flag

    cpu = tmp_path / "cpu"
    for n in range(4):  # two cores with two hyperthreads each
        topology = cpu / f"cpu{n}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text("0\n")
        (topology / "core_id").write_text(f"{n % 2}\n")
    import os

    allowed = sorted(os.sched_getaffinity(0))
    if set(allowed) >= {0, 1, 2, 3}:
        assert available_cores(cpu) == 2
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16\n\nprocessor\t: 1\n")
    assert cpu_bf16_flag(info) == "avx512_bf16"
    info.write_text("flags\t\t: fpu avx2 avx512_bf16 amx_bf16 amx_tile\n")
    assert cpu_bf16_flag(info) == "amx_bf16"
    info.write_text("flags\t\t: fpu sse avx2\n")
    assert cpu_bf16_flag(info) is None and cpu_bf16_flag(tmp_path / "missing") is None


def test_settings_of_the_loader_the_optimizer_and_the_model() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    from stepscope.capture.settings import SettingsWatch, read_settings

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten()).to(memory_format=torch.channels_last)
    loader = DataLoader(TensorDataset(torch.randn(40, 3, 8, 8)), batch_size=8, num_workers=0, pin_memory=False)
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    st = read_settings(model, loader, opt, lambda obj: {"line": 1} if obj is loader else None)
    assert st.dataloader is not None and (st.dataloader.num_workers, st.dataloader.batches_per_epoch) == (0, 5)
    assert st.dataloader.location == {"line": 1}
    assert st.optimizer is not None and st.optimizer.name == "AdamW" and st.optimizer.foreach is True
    assert st.channels_last is True and st.conv_layers == 1 and st.compiled is False
    assert st.intra_op_threads == torch.get_num_threads()
    watch = SettingsWatch(lambda: (model, loader, opt))
    watch.window_started()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randn(2, 3, 8, 8))
    model(torch.randn(2, 3, 8, 8))  # the probe is gone after the first forward
    watch.window_ended()
    assert watch.settings is not None and watch.settings.autocast == "bfloat16"


def test_on_a_gpu_the_reference_is_two_synchronized_slices_never_a_sync_per_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One torch.cuda.synchronize() at each end of the slice before the window (steps 1 to skip-1) and of the
    slice after it (reference_steps steps): four in all, however many steps run."""
    import sys
    import types

    from stepscope.capture import session as session_mod
    from stepscope.capture.export import Exported
    from stepscope.capture.options import CaptureOptions
    from stepscope.capture.session import CaptureSession

    syncs: list[int] = []
    cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                 synchronize=lambda: syncs.append(1))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))

    class Window:  # the profiler window (one pass), without a profiler
        def __init__(self, spec: CaptureOptions, first_step: int, path: Path, timing_path: Path | None,
                     deferred: bool = False) -> None:
            self.spec, self.first_step, self.path = spec, first_step, path
            self.boundaries, self.gpu, self.exported, self.running, self.waiting = 0, True, None, False, False
            self.timing = self.timing_exported = None
            self.recorded_pass_starting = False

        length = property(lambda self: self.spec.warmup + self.spec.steps)
        recording = property(lambda self: self.running and self.boundaries >= self.spec.warmup)
        recorded = property(lambda self: max(0, min(self.boundaries - self.spec.warmup, self.spec.steps)))

        def start(self) -> None:
            self.running = True

        def step(self) -> bool:
            self.boundaries += 1
            if self.boundaries >= self.length:
                self.running, self.exported = False, Exported(self.path)
                return True
            return False

    monkeypatch.setattr(session_mod, "ProfilerWindow", Window)
    session = CaptureSession(CaptureOptions(skip=5, warmup=2, steps=5, reference_steps=5, calibrate=False), tmp_path)
    for _ in range(40):
        session.mark("optimizer")
    result = session.close()
    assert len(syncs) == 4
    assert result.reference is not None and result.reference.method == "synchronized slices"
    # Steps 2-5 before the window; after it, one settling step (the export's cost) and then 5.
    assert result.reference.steps == 4 + 5 and len(result.reference.values_ns) == 2


def test_a_profiler_that_cannot_start_is_the_reason_given_even_after_later_notes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The program runs its own profiler, so ours cannot start: that is why nothing was recorded, whatever a
    listener noted afterwards."""
    from stepscope.capture import session as session_mod
    from stepscope.capture.options import CaptureOptions
    from stepscope.capture.session import CaptureSession
    from stepscope.runreport import nothing_recorded

    class Window:
        def __init__(self, spec: CaptureOptions, first_step: int, path: Path, timing_path: Path | None,
                     deferred: bool = False) -> None:
            self.running, self.waiting, self.exported = False, False, None

        def start(self) -> None:
            raise RuntimeError("Profiler is already enabled on this thread")

    class LateNote:
        notes = ("the memory census was not written (no space left on device)",)

        def window_started(self) -> None: ...

        def window_ended(self) -> None: ...

    monkeypatch.setattr(session_mod, "ProfilerWindow", Window)
    spec = CaptureOptions(skip=1, warmup=0, steps=3, reference_steps=0)
    session = CaptureSession(spec, tmp_path)
    session.listeners.append(LateNote())
    for _ in range(6):
        session.mark("optimizer")
    result = session.close()
    assert result.trace_path is None and result.steps_recorded == 0
    assert result.failure == ("could not start the profiler (RuntimeError: Profiler is already enabled on this "
                              "thread); nothing was recorded")
    assert result.notes[-1] == LateNote.notes[0]
    assert nothing_recorded(result, spec) == result.failure
