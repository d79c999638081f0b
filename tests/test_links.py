"""trace/links.py on hand-built traces: the counts in its notes, and which repeated events count once."""

from __future__ import annotations

import json
from pathlib import Path

from builder import BACKWARD_TID, MAIN_TID, TraceBuilder
from stepscope.analysis.launches import launching_call
from stepscope.trace.kineto import read_kineto
from stepscope.trace.model import Kind


def write(tmp_path: Path, events: list[dict]) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def five_launches() -> TraceBuilder:
    b = TraceBuilder()
    b.step(1, 0, 500)
    for i in range(5):
        b.launch("gemm", (10 + 50 * i, 20 + 50 * i), (30 + 50 * i, 60 + 50 * i))
    return b


def test_gpu_activities_without_a_launch_link_are_counted(tmp_path: Path) -> None:
    b = five_launches()
    kernels = [e for e in b.events if e["cat"] == "kernel"]
    del kernels[0]["args"]["correlation"], kernels[1]["args"]["correlation"]  # two without an id
    kernels[2]["args"]["correlation"] = 999  # one whose id no runtime call has
    notes = read_kineto(write(tmp_path, b.events)).meta.notes
    assert any(n.startswith("2 of 5 GPU activities") and "no correlation id" in n for n in notes), notes
    assert any(n.startswith("1 of 5 GPU activities") and "no recorded runtime call has it" in n for n in notes)


def test_an_event_written_twice_counts_once_and_is_said(tmp_path: Path) -> None:
    b = five_launches()
    events = b.events + [dict(e) for e in b.events if e["cat"] == "kernel"][:3]
    trace = read_kineto(write(tmp_path, events))
    assert int((trace.events.kind == 4).sum()) == 5  # Kind.KERNEL
    assert any(n.startswith("3 events were exact copies") for n in trace.meta.notes), trace.meta.notes


def test_look_alike_events_without_ids_are_both_kept(tmp_path: Path) -> None:
    """In a µs-resolution trace two real ops can share a time, a name and a thread; without an id to say they
    are one event, both stay."""
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 100, "dur": 1}
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 500}
    trace = read_kineto(write(tmp_path, [step, op, dict(op)]))
    assert len(trace.events) == 3 and not any("copies" in n for n in trace.meta.notes)


def test_nameless_and_threadless_events_are_counted(tmp_path: Path) -> None:
    b = five_launches()
    kernels = [e for e in b.events if e["cat"] == "kernel"]
    del kernels[0]["name"]
    kernels[1]["name"] = ""
    runtime = [e for e in b.events if e["cat"] == "cuda_runtime"]
    del runtime[0]["tid"], runtime[0]["args"]["External id"]  # no op names it: it cannot be put on a thread
    notes = read_kineto(write(tmp_path, b.events)).meta.notes
    assert any(n.startswith("2 events have no name") for n in notes), notes
    assert any(n.startswith("1 host events have no process or thread id") for n in notes), notes


def test_a_runtime_call_on_another_thread_goes_to_the_op_that_holds_it(tmp_path: Path) -> None:
    """A call inside the op of its External id but written on thread 7 is put on the op's thread; a call on
    thread 7 that its op does not hold in time stays where it is (the id alone is not proof)."""
    b = TraceBuilder()
    b.step(1, 0, 500)
    held = b.op("aten::mm", 10, 40)
    outside = b.op("aten::add", 100, 110)
    for op, start in ((held, 20), (outside, 200)):
        b.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000, "tid": 7,
                         "ts": start, "dur": 5, "args": {"External id": op["args"]["External id"]}})
    trace = read_kineto(write(tmp_path, b.events))
    calls = trace.events.kind == Kind.RUNTIME
    assert trace.events.tid[calls].tolist() == [MAIN_TID, 7]
    assert any(n.startswith("1 runtime calls were recorded on another thread") for n in trace.meta.notes)


def test_a_device_clock_behind_the_hosts_is_moved_by_the_least_shift(tmp_path: Path) -> None:
    """Five kernels each 20 µs after its launch began, all written 1,000 µs early: the device timeline moves
    980 µs later (the shift that puts the earliest-starting one at its launch's start), and a note says so."""
    b = five_launches()
    for e in b.events:
        if e["cat"] == "kernel":
            e["ts"] -= 1000
    trace = read_kineto(write(tmp_path, b.events))
    ev, link = trace.events, launching_call(trace)
    kernels = ev.kind == Kind.KERNEL
    assert ((ev.start - ev.start[link])[kernels] == 0).all()  # each 20 µs after its call began, now at it
    assert any("5 of 5 GPU activities start before the runtime call" in n and "moved 0.98 ms later" in n
               for n in trace.meta.notes), trace.meta.notes


def test_a_correlation_id_on_two_calls_links_nothing_but_a_graph_launch_links_its_kernels(tmp_path: Path) -> None:
    b = five_launches()
    calls = [e for e in b.events if e["cat"] == "cuda_runtime"]
    calls[1]["args"]["correlation"] = calls[0]["args"]["correlation"]  # two calls, one id: kernels 1 and 2 use it
    [kernel] = [e for e in b.events if e["cat"] == "kernel" and e["args"]["correlation"] == 2]
    kernel["args"]["correlation"] = 1
    graph = b.runtime("cudaGraphLaunch", 300, 305)
    for i in range(3):
        b.kernel("graph_kernel", 310 + 10 * i, 315 + 10 * i, correlation=graph)
    trace = read_kineto(write(tmp_path, b.events))
    link = launching_call(trace)[trace.events.kind == Kind.KERNEL]
    assert (link < 0).sum() == 2  # the two kernels of the shared id; the graph's three are linked
    assert any(n.startswith("2 of 8 GPU activities carry a correlation id that names no single launch")
               for n in trace.meta.notes), trace.meta.notes


def test_runtime_calls_on_a_thread_of_their_own_go_to_the_innermost_op_holding_them(tmp_path: Path) -> None:
    """No External id ties the calls to ops, and all of them lie on thread 0, where no op ran: each goes to the
    thread whose innermost op holds it in time: the backward thread's leaf op over the main thread's long range."""
    b = TraceBuilder()
    b.step(1, 0, 500)
    b.op("aten::mm", 10, 40)
    b.op("autograd::engine::evaluate_function", 100, 300)  # the main thread waits in backward
    b.op("MmBackward0", 150, 200, tid=BACKWARD_TID)
    for start in (20, 160, 400):  # in aten::mm, in MmBackward0, in the step alone
        b.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000, "tid": 0,
                         "ts": start, "dur": 5, "args": {}})
    trace = read_kineto(write(tmp_path, b.events))
    calls = trace.events.kind == Kind.RUNTIME
    assert trace.events.tid[calls].tolist() == [MAIN_TID, BACKWARD_TID, MAIN_TID]
    assert any(n.startswith("3 of 3 runtime calls lie on threads where no op ran") for n in trace.meta.notes)
