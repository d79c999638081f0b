"""The reader keeps what record_shapes and profile_memory record: op input shapes, types and scalar values,
and the allocator's block addresses and threads (to pair each allocation with its free)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from stepscope.trace.kineto import read_kineto

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 8 * 8, 16))
    x = torch.randn(4, 3, 16, 16)
    path = tmp_path_factory.mktemp("inputs") / "trace.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        model(x).sum().backward()
    prof.export_chrome_trace(str(path))
    return path


def rows_named(trace, name: str) -> list[int]:
    return np.flatnonzero(trace.names_where(lambda s: s == name)).tolist()


def test_op_inputs_as_recorded(trace_path) -> None:
    trace = read_kineto(trace_path)
    addmm = trace.inputs_of(rows_named(trace, "aten::addmm")[0])
    assert addmm.dims[:3] == ((16,), (4, 512), (512, 16))
    assert addmm.types[:3] == ("float", "float", "float")
    conv = trace.inputs_of(rows_named(trace, "aten::conv2d")[0])
    assert conv.dims[:2] == ((4, 3, 16, 16), (8, 3, 3, 3))
    assert conv.concrete[3:7] == ("[2, 2]", "[1, 1]", "[1, 1]", "1")  # stride, padding, dilation, groups
    # Every op the file records inputs for has them, and the distinct signatures are decoded once each.
    raw = json.loads(trace_path.read_text())["traceEvents"]
    with_dims = sum(1 for e in raw if e.get("ph") == "X" and "Input Dims" in e.get("args", {}))
    assert int((trace.events.inputs >= 0).sum()) == with_dims
    assert len(trace.op_inputs) == len(set(trace.op_inputs))


def test_allocations_pair_with_their_frees(trace_path) -> None:
    mem = read_kineto(trace_path).memory
    assert len(mem) and (mem.addr >= 0).all() and (mem.tid >= 0).all()
    live: dict[int, int] = {}
    for addr, size in zip(mem.addr.tolist(), mem.bytes.tolist(), strict=True):
        if size > 0:
            live[addr] = size
        elif size < 0 and addr in live:
            assert live.pop(addr) == -size  # a free returns the block its allocation took


def test_traces_without_shapes_have_none(builder, tmp_path) -> None:
    builder.op("aten::mm", 0, 10)
    trace = read_kineto(builder.write(tmp_path / "t.json"))
    assert trace.inputs_of(0) is None and trace.op_inputs == ()
    assert (trace.memory.addr == -1).all()
