"""The Nsight Systems reader: the real exports in ../shared/traces/nsys/, and built ones with known answers."""

from __future__ import annotations

import os
import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from nsys_builder import (
    BATCH_BYTES,
    DEVICE,
    KERNEL_NS,
    LOOP_START,
    LOSS_BYTES,
    MAIN_TID,
    PID,
    SCHEMA,
    SESSION_START_NS,
    STREAM,
    WORKER_TID,
    NsysBuilder,
    global_id,
    training_loop,
)
from stepscope.analysis.steps import find_steps
from stepscope.errors import StepscopeError
from stepscope.trace.model import CopyKind, DeviceInfo, HostMemory, Kind, Trace
from stepscope.trace.nsys import read_nsys

NSYS = Path(__file__).resolve().parents[2] / "shared" / "traces" / "nsys"
STEPS, KERNELS_PER_STEP = 5, 24


def real(name: str) -> Path:
    path = NSYS / name
    if not path.exists():
        pytest.skip(f"shared export {path} is not available")
    return path


def named(trace: Trace, kind: Kind) -> Counter[str]:
    """How many events of `kind` carry each name."""
    rows = trace.events.kind == kind
    return Counter(trace.strings[i] for i in trace.events.name[rows].tolist())


def rows_of(trace: Trace, kind: Kind, name: str | None = None) -> np.ndarray:
    mask = trace.events.kind == kind
    if name is not None:
        mask &= trace.names_where(lambda s: s == name)
    return np.flatnonzero(mask)


def launcher_of(trace: Trace, row: int) -> int:
    """The one runtime call whose correlation id the GPU activity carries."""
    ev = trace.events
    calls = np.flatnonzero((ev.kind == Kind.RUNTIME) & (ev.correlation == ev.correlation[row]))
    assert len(calls) == 1, f"row {row}: {len(calls)} runtime calls share its correlation id"
    return int(calls[0])


# -- real exports ----------------------------------------------------------------------------------
def test_gtx1060_concurrent_kernels() -> None:
    trace = read_nsys(real("gtx1060_concurrent_kernels.sqlite"))
    ev = trace.events
    assert (trace.meta.format, trace.meta.accelerator) == ("nsys", "cuda")
    # The Intel GPU and the Windows render driver in TARGET_INFO_GPU are not CUDA devices.
    assert trace.meta.devices == (DeviceInfo(id=0, name="GeForce GTX 1060 with Max-Q Design", kind="cuda",
                                             compute_capability="6.1", total_memory_bytes=6442450944, sm_count=10,
                                             warp_size=32),)
    signature = "(double *, unsigned long long, unsigned long long)"
    assert named(trace, Kind.KERNEL) == {f"test{i}{signature}": n for i, n in enumerate((3, 2, 1, 1, 2))}
    assert named(trace, Kind.MEMCPY) == {"Memcpy HtoD (Pinned -> Device)": 5, "Memcpy DtoH (Device -> Pinned)": 6}
    htod, dtoh = (rows_of(trace, Kind.MEMCPY)[ev.copy_kind[rows_of(trace, Kind.MEMCPY)] == k]
                  for k in (CopyKind.HTOD, CopyKind.DTOH))
    assert (len(htod), len(dtoh)) == (5, 6)
    assert (ev.host_memory[rows_of(trace, Kind.MEMCPY)] == HostMemory.PINNED).all()
    assert (int(ev.bytes[htod].sum()), int(ev.bytes[dtoh].sum())) == (4 * 40_000 + 40_000_000, 5 * 40_000 + 40_000_000)
    assert named(trace, Kind.MEMSET) == {"Memset (Device)": 1}
    assert ev.bytes[rows_of(trace, Kind.MEMSET)].tolist() == [40_000]
    runtime = named(trace, Kind.RUNTIME)
    assert (runtime["cudaEventSynchronize"], runtime["cudaLaunchKernel"], runtime["cudaMemcpyAsync"]) == (5, 7, 10)
    assert not any("_v" in name for name in runtime)  # cudaEventSynchronize_v3020 -> cudaEventSynchronize
    assert named(trace, Kind.GPU_SYNC) == {"Event Sync": 5, "Context Sync": 1}
    # Seven kernels join their cudaLaunchKernel; extra-p added two copies (1124, 1135) with no call.
    kernels = rows_of(trace, Kind.KERNEL)
    launched = [r for r in kernels if ev.correlation[r] < 1000]
    assert len(launched) == 7
    assert {trace.name_of(launcher_of(trace, r)) for r in launched} == {"cudaLaunchKernel"}
    # Times are the export's ns: correlation 122's kernel runs 336893 ns, 442693 ns after its launch began.
    (k122,) = kernels[ev.correlation[kernels] == 122]
    assert (int(ev.dur[k122]), int(ev.start[k122] - ev.start[launcher_of(trace, k122)])) == (336_893, 442_693)
    assert ev.start.min() == 0
    assert trace.meta.start_epoch_ns == 1651514235128046600 + 159_835_223  # session start + first event
    assert trace.meta.process_names == {32084: "ParallelKernelsTest.exe"}
    # Device rows sit on (device, stream) like Kineto's; host rows on the thread.
    assert set(zip(ev.pid[kernels].tolist(), ev.tid[kernels].tolist(), strict=True)) == {
        (0, 14), (0, 15), (0, 16), (0, 17), (0, 18)}
    assert set(ev.tid[rows_of(trace, Kind.RUNTIME)].tolist()) == {33680}


def test_a100_vector_ops_counts_each_runtime_call_once() -> None:
    trace = read_nsys(real("a100_vector_ops_cpu_sampling.sqlite"))
    ev = trace.events
    assert named(trace, Kind.RUNTIME) == {"cudaDeviceSynchronize": 7, "cudaLaunchKernel": 6, "cudaMalloc": 4,
                                          "cudaMemcpy": 1}
    runtime = rows_of(trace, Kind.RUNTIME)
    assert len(np.unique(ev.correlation[runtime])) == len(runtime) == 18
    # Of the two rows of a call, the plain-named one that encloses the versioned one is kept.
    (sync416,) = runtime[ev.correlation[runtime] == 416]
    assert int(ev.dur[sync416]) == 358_522_163 - 357_887_884
    kernels = rows_of(trace, Kind.KERNEL)
    assert len(kernels) == 6
    assert [trace.name_of(launcher_of(trace, r)) for r in kernels] == ["cudaLaunchKernel"] * 6
    assert named(trace, Kind.KERNEL)["init_array(double*, unsigned long)"] == 2
    assert named(trace, Kind.GPU_SYNC) == {"Context Sync": 7}
    assert trace.meta.devices == tuple(
        DeviceInfo(id=i, name="A100-PCIE-40GB", kind="cuda", compute_capability="8.0",
                   total_memory_bytes=42505273344, sm_count=108, warp_size=32) for i in range(4))
    # OS runtime calls are OTHER events on their threads; the zero-length "profiling started" marker is not.
    other = rows_of(trace, Kind.OTHER)
    assert named(trace, Kind.OTHER)["pthread_create"] >= 1 and (ev.dur[other] > 0).all()
    assert trace.meta.thread_names[(869806, 869806)] == "ex-gpu"
    assert any("688 CPU samples" in note for note in trace.meta.notes)
    assert any("recorded twice" in note for note in trace.meta.notes)


# -- built exports ---------------------------------------------------------------------------------
def build(tmp_path: Path, builder: NsysBuilder, name: str = "export.sqlite") -> Trace:
    return read_nsys(builder.write(tmp_path / name))


def test_builder_tables_match_the_real_exports(tmp_path: Path) -> None:
    path = training_loop(steps=1).write(tmp_path / "loop.sqlite")

    def columns(db_path: Path, table: str) -> list[tuple]:
        with closing(sqlite3.connect(db_path)) as db:
            return [row[1:] for row in db.execute(f'PRAGMA table_info("{table}")')]

    # OSRT_API is copied from the 2021 export (the 2022 one traced no OS calls), the rest from the 2022 one.
    gtx, a100 = real("gtx1060_concurrent_kernels.sqlite"), real("a100_vector_ops_cpu_sampling.sqlite")
    with closing(sqlite3.connect(gtx)) as db:
        in_gtx = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    copied = sorted(in_gtx & set(SCHEMA))
    assert len(copied) == 11
    for table in copied:
        assert columns(path, table) == columns(gtx, table), table
    assert columns(path, "OSRT_API") == columns(a100, "OSRT_API")


def test_training_loop(tmp_path: Path) -> None:
    trace = build(tmp_path, training_loop(STEPS, KERNELS_PER_STEP))
    ev = trace.events
    assert Counter(Kind(k).name for k in ev.kind.tolist()) == {
        "KERNEL": STEPS * KERNELS_PER_STEP, "RUNTIME": STEPS * (KERNELS_PER_STEP + 5), "MEMCPY": 2 * STEPS,
        "MEMSET": STEPS, "GPU_SYNC": 2 * STEPS, "USER_ANNOTATION": 5 * STEPS, "OTHER": STEPS}
    assert named(trace, Kind.RUNTIME) == {"cudaLaunchKernel": STEPS * KERNELS_PER_STEP, "cudaMemcpyAsync": 2 * STEPS,
                                          "cudaStreamSynchronize": 2 * STEPS, "cudaMemsetAsync": STEPS}
    assert named(trace, Kind.GPU_SYNC) == {"Stream Sync": 2 * STEPS}
    assert named(trace, Kind.MEMCPY) == {"Memcpy HtoD (Pageable -> Device)": STEPS,
                                         "Memcpy DtoH (Device -> Pageable)": STEPS}
    copies = rows_of(trace, Kind.MEMCPY)
    assert sorted(zip(ev.copy_kind[copies].tolist(), ev.host_memory[copies].tolist(), ev.bytes[copies].tolist(),
                      strict=True)) == sorted(
        [(CopyKind.HTOD, HostMemory.PAGEABLE, BATCH_BYTES)] * STEPS + [(CopyKind.DTOH, HostMemory.PAGEABLE, LOSS_BYTES)]
        * STEPS)
    # Times in ns from the first event, the loop's first call; the session start dates them.
    assert trace.meta.start_epoch_ns == SESSION_START_NS + LOOP_START
    first_copy = copies[0]
    assert (int(ev.start[first_copy]), int(ev.dur[first_copy])) == (5_000, 60_000)
    kernels = rows_of(trace, Kind.KERNEL)
    assert (ev.dur[kernels] == KERNEL_NS).all()
    assert set(zip(ev.device[kernels].tolist(), ev.stream[kernels].tolist(), strict=True)) == {(DEVICE, STREAM)}
    # Every GPU activity joins exactly one runtime call, of the right name, that began before it.
    for kind, api in ((Kind.KERNEL, "cudaLaunchKernel"), (Kind.MEMCPY, "cudaMemcpyAsync"),
                      (Kind.MEMSET, "cudaMemsetAsync"), (Kind.GPU_SYNC, "cudaStreamSynchronize")):
        for row in rows_of(trace, kind):
            call = launcher_of(trace, row)
            assert trace.name_of(call) == api and ev.start[call] < ev.start[row]
    assert {int(ev.start[r] - ev.start[launcher_of(trace, r)]) for r in kernels} == {3_000}
    # NVTX ranges are user annotations on the thread that opened them, under their plain names.
    steps = rows_of(trace, Kind.USER_ANNOTATION, "train_step")
    assert len(steps) == STEPS
    assert set(zip(ev.pid[steps].tolist(), ev.tid[steps].tolist(), strict=True)) == {(PID, MAIN_TID)}
    step_ns = 15_000 + 56_000 + KERNELS_PER_STEP * 5_000 + 4_000 + 8_000 + 2_000
    assert (ev.dur[steps] == step_ns).all()
    prefetch = rows_of(trace, Kind.USER_ANNOTATION, "prefetch")  # a registered string in the "data" domain
    assert set(ev.tid[prefetch].tolist()) == {WORKER_TID} and len(prefetch) == STEPS
    assert any(note.startswith("NVTX ranges from named domains: data (5)") for note in trace.meta.notes)
    assert named(trace, Kind.OTHER) == {"read": STEPS}
    assert trace.meta.thread_names == {(PID, MAIN_TID): "python", (PID, WORKER_TID): "pt_data_worker"}
    assert trace.meta.process_names == {PID: "python"}
    assert trace.meta.devices[0].name == "NVIDIA A100-SXM4-80GB"


def test_training_loop_steps_come_from_the_repeated_nvtx_range(tmp_path: Path) -> None:
    trace = build(tmp_path, training_loop(STEPS, KERNELS_PER_STEP))
    for step_range in (None, "train_step"):
        steps = find_steps(trace, step_range)
        assert steps.source == "range train_step"
        assert len(steps) == STEPS
        assert (steps.gpu_activity_count == KERNELS_PER_STEP + 3).all()  # kernels, two copies, a memset


def same_events(a: Trace, b: Trace) -> None:
    assert a.strings == b.strings
    for column in ("kind", "start", "dur", "pid", "tid", "device", "stream", "name", "correlation", "bytes",
                   "copy_kind", "host_memory"):
        np.testing.assert_array_equal(getattr(a.events, column), getattr(b.events, column), err_msg=column)


def test_exports_without_enum_tables_read_the_same(tmp_path: Path) -> None:
    with_enums = build(tmp_path, training_loop(enums=True), "enums.sqlite")
    without = build(tmp_path, training_loop(enums=False), "plain.sqlite")
    with closing(sqlite3.connect(tmp_path / "plain.sqlite")) as db:
        assert not db.execute("SELECT name FROM sqlite_master WHERE name LIKE 'ENUM_%'").fetchall()
    same_events(with_enums, without)


def test_enum_tables_decide_when_present(tmp_path: Path) -> None:
    path = training_loop(steps=1).write(tmp_path / "renumbered.sqlite")
    with closing(sqlite3.connect(path)) as db:  # swap Pageable and Pinned: the reader must follow the table
        db.execute("UPDATE ENUM_CUDA_MEM_KIND SET name = 'CUDA_MEMOPR_MEMORY_KIND_PINNED' WHERE id = 0")
        db.execute("UPDATE ENUM_CUDA_MEM_KIND SET name = 'CUDA_MEMOPR_MEMORY_KIND_PAGEABLE' WHERE id = 1")
        db.commit()
    trace = read_nsys(path)
    assert named(trace, Kind.MEMCPY) == {"Memcpy HtoD (Pinned -> Device)": 1, "Memcpy DtoH (Device -> Pinned)": 1}
    assert (trace.events.host_memory[rows_of(trace, Kind.MEMCPY)] == HostMemory.PINNED).all()


def test_versioned_runtime_names_are_stripped(tmp_path: Path) -> None:
    versioned = build(tmp_path, training_loop(versioned_names=True), "versioned.sqlite")
    plain = build(tmp_path, training_loop(versioned_names=False), "plain.sqlite")
    with closing(sqlite3.connect(tmp_path / "versioned.sqlite")) as db:
        stored = {v for (v,) in db.execute("SELECT value FROM StringIds WHERE value LIKE 'cuda%'")}
    assert {"cudaLaunchKernel_v7000", "cudaStreamSynchronize_v3020", "cudaMemcpyAsync_v3020"} <= stored
    same_events(versioned, plain)


def test_runtime_calls_recorded_twice_count_once(tmp_path: Path) -> None:
    single = build(tmp_path, training_loop(), "single.sqlite")
    double = build(tmp_path, training_loop(duplicate_runtime=True), "double.sqlite")
    with closing(sqlite3.connect(tmp_path / "double.sqlite")) as db:
        (stored,) = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    assert stored == 2 * STEPS * (KERNELS_PER_STEP + 5)
    assert named(double, Kind.RUNTIME) == named(single, Kind.RUNTIME)
    # The enclosing row is kept: 50 ns earlier and later than the versioned one.
    calls_single, calls_double = rows_of(single, Kind.RUNTIME), rows_of(double, Kind.RUNTIME)
    np.testing.assert_array_equal(double.events.dur[calls_double], single.events.dur[calls_single] + 100)
    assert any("recorded twice" in note for note in double.meta.notes)
    assert not any("recorded twice" in note for note in single.meta.notes)


def test_export_without_nvtx(tmp_path: Path) -> None:
    trace = build(tmp_path, training_loop(nvtx=False))
    with closing(sqlite3.connect(tmp_path / "export.sqlite")) as db:
        assert not db.execute("SELECT name FROM sqlite_master WHERE name = 'NVTX_EVENTS'").fetchall()
    assert not (trace.events.kind == Kind.USER_ANNOTATION).any()
    assert len(rows_of(trace, Kind.KERNEL)) == STEPS * KERNELS_PER_STEP
    assert find_steps(trace).source == "GPU activity span"


def test_without_nvtx_the_window_is_the_gpus_working_span_not_the_process(tmp_path: Path) -> None:
    """`nsys profile python train.py` with no NVTX: start-up (here 1.5 ms of cudaMalloc and a long read before
    the loop) is no step. The window runs from the first launch (the first batch's copy at LOOP_START) to the
    last GPU end (the last step's loss copy), and the GPU's busy share is taken over it."""
    from nsys_builder import KERNEL_NS, LAUNCH_GAP_NS, LOOP_START
    from stepscope.pipeline import analyze

    b = training_loop(nvtx=False)
    b.runtime("cudaMalloc", 100_000, 1_600_000)  # start-up: allocator and module loading, no GPU work
    b.osrt("read", 10_000, 1_900_000)
    report = analyze([build(tmp_path, b)])
    # Each step (µs): copy call 15 + sync 56 + 24 launches x 5 + zero_grad 4 + loss copy 8 + sync 2 + Python 20
    # = 225; the last step's loss copy ends 7 µs into its 8 µs call: the span is 4 x 225 + 15+56+120+4+7 = 1102.
    step_us = 15 + 56 + KERNELS_PER_STEP * LAUNCH_GAP_NS / 1e3 + 4 + 8 + 2 + 20
    span_us = (STEPS - 1) * step_us + 15 + 56 + KERNELS_PER_STEP * LAUNCH_GAP_NS / 1e3 + 4 + 7
    assert report.summary.step_source == "GPU activity span" and len(report.steps) == 1
    assert report.steps[0].duration_us == pytest.approx(span_us)
    assert report.steps[0].breakdown_us["kernel"] == pytest.approx(STEPS * KERNELS_PER_STEP * KERNEL_NS / 1e3)
    assert LOOP_START > 1_900_000  # the start-up above ends before the loop
    assert report.patterns and report.patterns[0].id != "cpu_compute_bound"  # start-up decides nothing
    assert any("no steps in the trace" in n and "--step-range" in n for n in report.notes)


def test_open_nvtx_range_ends_at_the_trace_end(tmp_path: Path) -> None:
    b = NsysBuilder()
    corr = b.runtime("cudaLaunchKernel", 1_000, 5_000)
    b.kernel("k", 4_000, 9_000, corr)
    b.nvtx_range("epoch", 500, None)  # nsys leaves `end` NULL when the capture stops inside a range
    b.nvtx_range("mark", 2_000, None, event_type=34)  # instant marks are skipped
    trace = build(tmp_path, b)
    (epoch,) = rows_of(trace, Kind.USER_ANNOTATION)
    assert trace.name_of(epoch) == "epoch"
    assert (int(trace.events.start[epoch]), int(trace.events.end[epoch])) == (0, 9_000 - 500)
    assert any("still open" in note for note in trace.meta.notes)


def test_correlation_ids_are_scoped_to_their_process(tmp_path: Path) -> None:
    b = NsysBuilder()
    for pid, launch in ((PID, 1_000), (PID + 1, 2_000)):  # two ranks whose CUPTI ids both start at 1
        b._correlation = iter([1])
        corr = b.runtime("cudaLaunchKernel", launch, launch + 500, tid=pid, pid=pid)
        b.kernel(f"kernel_of_{pid}", launch + 600, launch + 900, corr, pid=pid)
    trace = build(tmp_path, b)
    for row in rows_of(trace, Kind.KERNEL):
        assert trace.name_of(row) == f"kernel_of_{trace.events.pid[launcher_of(trace, row)]}"
    assert any("2 processes" in note for note in trace.meta.notes)


def test_rows_without_timestamps_are_left_out(tmp_path: Path) -> None:
    b = NsysBuilder()
    corr = b.runtime("cudaLaunchKernel", 1_000, 5_000)
    b.kernel("k", 4_000, 9_000, corr)
    b.kernel("lost", 0, 0, corr)  # CUPTI writes 0 for both when it could not time the activity
    trace = build(tmp_path, b)
    assert named(trace, Kind.KERNEL) == {"k": 1}
    assert trace.events.start.min() == 0 and trace.meta.start_epoch_ns == SESSION_START_NS + 1_000


# -- what is not an export -------------------------------------------------------------------------
def assert_refused(path: Path, words: str) -> None:
    with pytest.raises(StepscopeError) as caught:
        read_nsys(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and words in message and "\n" not in message


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    path.write_bytes(b"")
    assert_refused(path, "file is empty")


def test_random_bytes(tmp_path: Path) -> None:
    path = tmp_path / "noise.sqlite"
    path.write_bytes(os.urandom(8192))
    assert_refused(path, "not a readable SQLite database")


def test_truncated_export(tmp_path: Path) -> None:
    path = tmp_path / "truncated.sqlite"
    path.write_bytes(real("gtx1060_concurrent_kernels.sqlite").read_bytes()[:65536])
    assert_refused(path, "not a readable SQLite database (database disk image is malformed)")


def test_unrelated_database(tmp_path: Path) -> None:
    path = tmp_path / "shop.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
        db.execute("INSERT INTO orders VALUES (1, 'tea')")
        db.commit()
    assert_refused(path, "not an Nsight Systems export")


def test_export_without_events(tmp_path: Path) -> None:
    path = tmp_path / "idle.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.execute(SCHEMA["StringIds"])
        db.execute(SCHEMA["ThreadNames"])
        db.commit()
    assert_refused(path, "holds no CUDA, NVTX or OS runtime events")


def test_event_table_with_foreign_columns(tmp_path: Path) -> None:
    path = tmp_path / "odd.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (name TEXT)")
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ('k')")
        db.commit()
    assert_refused(path, "CUPTI_ACTIVITY_KIND_KERNEL is not as Nsight Systems writes it")


def test_missing_file_and_folder(tmp_path: Path) -> None:
    assert_refused(tmp_path / "absent.sqlite", "no such file")
    assert_refused(tmp_path, "is a folder")


def test_global_ids_decode_like_the_real_exports() -> None:
    # gtx1060's runtime thread 72058132318159760 is pid 32084, tid 33680; the builder encodes the same way.
    assert global_id(33680, 32084) == 72058132318159760
