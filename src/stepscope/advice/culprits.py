"""Who made a blocking call: the enclosing ops of each sync, and what that means in the user's code."""

from __future__ import annotations

import re

import numpy as np

from stepscope.analysis.hostops import NO_ENCLOSING_OP, enclosing_ops
from stepscope.trace.model import Kind, Trace

# Python frames that format a tensor for printing (with_stack=True traces record them).
PRINT_FRAME = re.compile(r"_tensor_str|__repr__|__format__|\bprint\b")
DATA_DEPENDENT = re.compile(r"^aten::(nonzero|masked_select|unique\w*|_unique\w*|repeat_interleave|"
                            r"index_put_|bincount|histc)$")


def printed(trace: Trace, row: int, python_rows: np.ndarray) -> bool:
    """Whether a Python frame that formats a tensor encloses the row (needs with_stack=True)."""
    ev = trace.events
    p = python_rows
    frames = p[(ev.pid[p] == ev.pid[row]) & (ev.tid[p] == ev.tid[row]) & (ev.start[p] <= ev.start[row])
               & (ev.end[p] >= ev.end[row])]
    names = [trace.name_of(f) for f in frames]
    if ev.stack[row] >= 0 and ev.stack[row] < len(trace.stacks):
        names += [trace.strings[i] for i in trace.stacks[ev.stack[row]]]
    return any(PRINT_FRAME.search(n) for n in names)


def blocking_causes(trace: Trace, rows: np.ndarray) -> list[str]:
    """One key per blocking row: 'outer op > inner op', or the API itself when no op encloses it."""
    keys = []
    python_rows = np.flatnonzero(trace.events.kind == Kind.PYTHON)
    for row, (outer, inner) in zip(rows, enclosing_ops(trace, rows), strict=True):
        if printed(trace, int(row), python_rows):
            keys.append(f"print of a tensor > {inner}")
        elif outer == NO_ENCLOSING_OP:
            keys.append(trace.name_of(int(row)))
        else:
            keys.append(outer if outer == inner else f"{outer} > {inner}")
    return keys


def what_it_is(cause: str) -> str:
    """The user-code construct behind a cause key, in words."""
    outer = cause.split(" > ")[0]
    if outer.startswith("print of a tensor"):
        return "printing or formatting a CUDA tensor (it copies the value to the host)"
    if outer in ("aten::item", "aten::_local_scalar_dense"):
        return ".item() or float()/int() of a CUDA tensor"
    if outer == "aten::is_nonzero":
        return "bool(tensor) or `if tensor:` on a CUDA tensor"
    if DATA_DEPENDENT.match(outer):
        return f"{outer.removeprefix('aten::')}(), whose output size depends on the data"
    if outer in ("aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu", "aten::tolist"):
        return ".cpu() / .to('cpu') / .numpy() / .tolist() of a CUDA tensor"
    if "DeviceSynchronize" in outer or "CtxSynchronize" in outer:
        return "torch.cuda.synchronize()"
    if "EventSynchronize" in outer:
        return "event.synchronize() or event.elapsed_time()"
    if "StreamSynchronize" in outer:
        return "stream.synchronize()"
    return f"{outer} (it waits for the GPU)"
