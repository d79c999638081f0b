"""What the copy fixes would do, by replay (as replay/whatif.py's, on the same graph and base step):
- resident tensors: copies of the same bytes every step made once before the loop: the copies, their launch calls
  and the host's waits for them leave every step;
- copies overlapped on a side stream: the copies run on a stream of their own (the copy engine) ahead of the
  compute that reads them, from pinned memory with non_blocking=True, so the host no longer waits for them; the
  step is then at least the copies' time on their stream;
- smaller copies: the copies move `factor` of their bytes (e.g. half: bfloat16 instead of float32), taking that
  share of their time, the host's waits for them shortened with them by the replay.

Each takes the copies' rows (GPU activities) and the host calls that wait for them (the copy's own synchronous
call, or the sync right after it: analysis/copy_groups.py), and says what it assumed.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from stepscope.analysis.launches import carry_launching_call, launching_call
from stepscope.analysis.steps import find_steps
from stepscope.replay.host_clock import HostCost
from stepscope.replay.whatif import WhatIf, _base_step, _cut_of, _replayed_step
from stepscope.trace.model import Events, Trace


def _calls(trace: Trace, copies: np.ndarray) -> np.ndarray:
    link = launching_call(trace)[copies]
    return np.unique(link[link >= 0])


def _bytes_text(trace: Trace, copies: np.ndarray, n_steps: int) -> str:
    per_step = float(trace.events.bytes[copies].sum()) / max(n_steps, 1)
    count = len(copies) / max(n_steps, 1)
    return f"{count:g} cop{'y' if count == 1 else 'ies'} a step ({per_step / 1e6:.1f} MB)"


def resident(trace: Trace, copies: np.ndarray, waits: np.ndarray, host_cost: HostCost | None = None) -> WhatIf | None:
    """The copies made once, before the steps: gone from each step with their calls and the waits for them."""
    if len(copies) == 0:
        return None
    ev = trace.events
    gpu = np.flatnonzero(trace.is_gpu_activity)
    dur = ev.dur[gpu].astype(np.float64)
    dur[np.searchsorted(gpu, copies)] = 0.0
    waits = np.unique(waits[waits >= 0])
    gone = np.union1d(_calls(trace, copies), waits)
    base, n = _base_step(trace, host_cost), len(find_steps(trace))
    step = _replayed_step(trace, host_cost=host_cost, rows=gpu, new_dur=dur, unblock=waits,
                          cut=_cut_of(trace, gone), count=n)
    return WhatIf("resident_tensors", base, step, 1.0, (
        f"{_bytes_text(trace, copies, n)}, the same size from the same line each step, copy the same tensors: made "
        "once before the loop, they leave every step with their calls and the host's waits for them",))


def side_stream(trace: Trace, copies: np.ndarray, waits: np.ndarray,
                host_cost: HostCost | None = None) -> WhatIf | None:
    """The copies on a stream of their own, ahead of the compute; the host no longer waits for them."""
    if len(copies) == 0:
        return None
    ev = trace.events
    stream = ev.stream.copy()
    side = int(stream.max()) + 1
    stream[copies] = side
    columns = {name: getattr(ev, name) for name in ev.__dataclass_fields__}
    moved = replace(trace, events=Events.from_columns(**{**columns, "stream": stream}))
    carry_launching_call(trace, np.arange(len(ev)), moved)
    # The waits leave the host (a synchronous copy's call with them: launched at its start, it returns at once).
    waits = np.unique(waits[waits >= 0])
    base, n = _base_step(trace, host_cost), len(find_steps(trace))
    step = _replayed_step(moved, host_cost=host_cost, unblock=waits, cut=_cut_of(moved, waits), count=n)
    return WhatIf("copy_overlap", base, step, 1.0, (
        f"{_bytes_text(trace, copies, n)} run on a stream of their own (one copy engine: one after another), "
        "issued ahead of the compute that reads them, which no longer queues behind them",
        f"the host no longer waits for them ({len(waits) / max(n, 1):g} waits a step removed)"))


def smaller(trace: Trace, copies: np.ndarray, factor: float, host_cost: HostCost | None = None) -> WhatIf | None:
    """The copies move `factor` of their bytes and take that share of their time."""
    if len(copies) == 0 or not 0 < factor < 1:
        return None
    ev = trace.events
    gpu = np.flatnonzero(trace.is_gpu_activity)
    dur = ev.dur[gpu].astype(np.float64)
    at = np.searchsorted(gpu, copies)
    dur[at] *= factor
    base, n = _base_step(trace, host_cost), len(find_steps(trace))
    step = _replayed_step(trace, host_cost=host_cost, rows=gpu, new_dur=dur, count=n)
    return WhatIf("half_transfer", base, step, 1.0, (
        f"{_bytes_text(trace, copies, n)} move {factor:g} of their bytes in {factor:g} of their time; the host's "
        "waits for them shorten with them",))
