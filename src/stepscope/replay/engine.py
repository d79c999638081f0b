"""Replay the step's graph: the host runs its recorded work on its own clock (the profiler's cost taken out, or
scaled to another host), each stream runs its work in launch order, and the host's waits end when what they
wait for is done in the new timeline: device work for a sync or a pageable copy, a batch from the workers for a
DataLoader wait. With nothing changed, the replay reproduces the recorded trace."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from stepscope.analysis.launches import carry_launching_call, launching_call
from stepscope.analysis.steps import STEP_COLUMNS, step_rows
from stepscope.replay.blocking import BatchWaits, QueueWaits, batch_waits, blocking_calls, queue_waits
from stepscope.replay.device import DeviceOps, device_ops
from stepscope.replay.host_clock import HostClock, HostCost, host_clock
from stepscope.trace.model import DeviceInfo, Events, Kind, Trace, absent, start_order

SYNC_TOLERANCE_NS = 10_000  # a stream whose work ended this much after a sync returned was not waited for
try:
    import stepscope.replay._walk as _walk  # type: ignore[import-not-found]  # the loop in C, where it was built
except ImportError:  # not built (no compiler, not Linux): the loop in Python
    _walk = None

_DROPPED_KINDS = (Kind.GPU_ANNOTATION, Kind.GPU_SYNC)  # projections of host ranges; no analysis reads them
_SYNC, _BATCH, _QUEUE = 0, 1, 2


@dataclass(frozen=True)
class _Waits:
    """The host's waits in start order: syncs (kind _SYNC), batches from workers (_BATCH) and launches that waited
    for room in a full launch queue (_QUEUE)."""

    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    own: np.ndarray  # a batch wait's (a queue wait's) own time when its batch is ready (the queue has room)
    ready: np.ndarray  # when a batch arrived (-inf: it did not wait)
    awaited: np.ndarray  # a queue wait's device activity whose start made room (-1: not a queue wait)
    tail: np.ndarray  # a queue wait's end after that start, as recorded

    @classmethod
    def of(cls, trace: Trace, calls: np.ndarray, batches: BatchWaits, queue: QueueWaits) -> _Waits:
        """The waits of `calls` (blocking calls' rows), `batches` and `queue`."""
        ev = trace.events
        rows = np.concatenate([calls, batches.rows, queue.rows])
        n_c, n_b, n_q = len(calls), len(batches), len(queue)
        kind = np.concatenate([np.full(n_c, _SYNC), np.full(n_b, _BATCH), np.full(n_q, _QUEUE)])
        own = np.concatenate([np.zeros(n_c), batches.own_ns, np.full(n_q, queue.own_ns)])
        ready = np.concatenate([np.full(n_c, -np.inf), batches.ready, np.full(n_q, -np.inf)])
        awaited = np.concatenate([np.full(n_c + n_b, -1), queue.awaited]).astype(np.int64)
        tail = np.concatenate([np.zeros(n_c + n_b), queue.tail])
        order = np.argsort(ev.start[rows], kind="stable")
        return cls(ev.start[rows][order], ev.end[rows][order], kind[order], own[order], ready[order],
                   awaited[order], tail[order])

    def intervals(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Where the host waited, for the host clock (a batch wait that did not wait is host work)."""
        waited = (self.kind != _BATCH) | np.isfinite(self.ready)
        return [(self.start[waited], self.end[waited])]


@dataclass
class _State:
    """The replay's host as it goes: how much later than its own clock it runs, after each wait."""

    host_at: np.ndarray  # deflated, speed-scaled host time of each wait's start and end, per wait
    shift: float = 0.0  # how much later (ns) the host runs from here on than its own clock says
    ends: list[int] = field(default_factory=list)  # waits' recorded ends, in processing order
    shifts: list[float] = field(default_factory=list)  # the shift after each


def _simulate(ops: DeviceOps, dur: np.ndarray, launch_at: np.ndarray, waits: _Waits, wait_start: np.ndarray,
              wait_end: np.ndarray, host_speed: float) -> tuple[np.ndarray, _State]:
    """New starts of the activities; the host's shift after each wait. One pass in launch order, on Python lists
    read in that order: the loop is sequential by nature, and indexing numpy arrays one scalar at a time costs
    several times more. What a wait asks of the pass so far (each stream's last activity, whether one is done) is
    known from the order alone, so the loop records nothing but the new times."""
    state = _State(host_at=wait_start)
    walk = ops.walk
    n = len(ops)
    new_start, new_end = [0.0] * n, [0.0] * n
    # When each activity could start but for what it waits on: its launch plus the launch latency, at once.
    at_launch, length = launch_at[ops.order] + ops.latency[ops.order], dur[ops.order]
    w_start, w_end = wait_start.tolist(), wait_end.tolist()
    # The waits each activity comes after (those that began before its launch), counted at once: keys rise in order.
    due = np.searchsorted(waits.start, ops.key[ops.order], side="left")
    # How many activities are done when each wait comes.
    done_at = np.searchsorted(due, np.arange(len(w_start)), side="right").tolist()
    if _walk is not None and walk.arrays is not None:
        return _simulate_in_c(ops, at_launch, length, waits, w_start, w_end, done_at, state, host_speed)
    c, shift = 0, state.shift
    for i, upto, at, p, gap, d, d_done, d_end, delay, took in zip(
            walk.index, due.tolist(), at_launch.tolist(), walk.prev, walk.gap, walk.dep, walk.dep_done, walk.dep_end,
            walk.delay, length.tolist(), strict=True):
        if c < upto:
            while c < upto:
                _wait(state, waits, c, w_start[c], w_end[c], done_at[c], ops, new_start, new_end, host_speed)
                c += 1
            shift = state.shift
        at += shift
        if p >= 0 and (after := new_end[p] + gap) > at:
            at = after
        if d >= 0:  # not replayed yet (launched later than this one): its measured end stands in
            after = new_end[d] if d_done else d_end
            at = after if after > at else at
        new_start[i] = begin = at + delay
        new_end[i] = begin + took
    while c < len(w_start):
        _wait(state, waits, c, w_start[c], w_end[c], done_at[c], ops, new_start, new_end, host_speed)
        c += 1
    return np.array(new_start, dtype=np.float64), state


def _simulate_in_c(ops: DeviceOps, at_launch: np.ndarray, length: np.ndarray, waits: _Waits, w_start: list[float],
                   w_end: list[float], done_at: list[int], state: _State, host_speed: float,
                   ) -> tuple[np.ndarray, _State]:
    """_simulate's loop with the activities between two waits replayed in C (_walk.c), the waits here as there."""
    assert _walk is not None and ops.walk.arrays is not None
    index, prev, gap, dep, dep_end, delay, dep_done = ops.walk.arrays
    at = np.ascontiguousarray(at_launch, dtype=np.float64)
    took = np.ascontiguousarray(length, dtype=np.float64)
    new_start, new_end = np.zeros(len(ops)), np.zeros(len(ops))
    done = 0
    for c in range(len(w_start)):  # the activities the wait comes after (those launched before it), then the wait
        _walk.run(done, done_at[c], state.shift, index, at, prev, gap, dep, dep_done, dep_end, delay, took,
                  new_start, new_end)
        done = done_at[c]
        _wait(state, waits, c, w_start[c], w_end[c], done, ops, new_start, new_end, host_speed)
    _walk.run(done, len(ops), state.shift, index, at, prev, gap, dep, dep_done, dep_end, delay, took, new_start,
              new_end)
    return new_start, state


def _wait(state: _State, waits: _Waits, c: int, h_start: float, h_end: float, done: int, ops: DeviceOps,
          new_start: list[float] | np.ndarray, new_end: list[float] | np.ndarray, host_speed: float) -> None:
    """One wait of the host, when the first `done` activities of the launch order are replayed. A sync ends when
    the work it waited for ends in the new timeline (plus the time it took after that work, as measured), or after
    its own time when it did not wait. A batch wait ends when the batch is ready (the workers keep their own clock)
    or after its own time. A launch into a full queue returns when the activity ahead of it starts (as long after as
    recorded), or after a launch's own time."""
    s, e = int(waits.start[c]), int(waits.end[c])
    measured_end = ops.end
    began = h_start + state.shift
    if waits.kind[c] == _QUEUE:
        a = int(waits.awaited[c])
        room = (new_start[a] if ops.walk.place[a] < done else ops.start[a]) + waits.tail[c]
        end = max(began + waits.own[c] / host_speed, room)
    elif waits.kind[c] == _BATCH:
        if np.isfinite(waits.ready[c]):  # it waited: the call ends its own time after the batch arrives
            end = max(began, float(waits.ready[c])) + waits.own[c] / host_speed
        else:
            end = began + (h_end - h_start)
    else:
        awaited = [i for i in ops.walk.last_done(done) if measured_end[i] <= e + SYNC_TOLERANCE_NS]
        if not awaited:
            end = began + (h_end - h_start)
        else:
            gpu_done = max(int(measured_end[i]) for i in awaited)
            new_done = max(new_end[i] for i in awaited)
            waited = gpu_done > s
            # After the wait, the call took `tail` (negative within the tolerance: the two clocks disagree a little).
            tail = e - gpu_done if waited else 0
            own = max(tail, 0) / host_speed if waited else (h_end - h_start)
            end = max(began + own, new_done + tail / host_speed)
    state.shift = end - h_end
    state.ends.append(e)
    state.shifts.append(state.shift)


def _host_map(state: _State, clock: HostClock, host_speed: float, times: np.ndarray) -> np.ndarray:
    """Host times on the new timeline: the host's own clock, moved by the shift of the last wait that had
    returned by then."""
    ends = np.asarray(state.ends, dtype=np.int64)
    shifts = np.asarray(state.shifts, dtype=np.float64)
    order = np.argsort(ends, kind="stable")
    ends, shifts = ends[order], shifts[order]
    k = np.searchsorted(ends, times, side="right") - 1
    shift = np.where(k >= 0, shifts[np.maximum(k, 0)] if len(shifts) else 0.0, 0.0)
    return clock.deflate(times) / host_speed + shift


def _gpu_rows(trace: Trace) -> np.ndarray:
    return trace.derived("replay.gpu_rows", lambda: np.flatnonzero(trace.is_gpu_activity))


def _queue_waits(trace: Trace, ops: DeviceOps) -> QueueWaits:
    position = np.empty(len(ops), dtype=np.int64)
    position[ops.order] = np.arange(len(ops))
    link = launching_call(trace)[ops.rows]
    return queue_waits(trace, ops.launch, ops.start, link, position, ops.order)


def device_waits(trace: Trace) -> np.ndarray:
    """Rows of the host calls that wait on the device: syncs, copies from or to pageable memory, and launches into a
    full launch queue; sorted by start."""
    ops = device_ops(trace, np.flatnonzero(trace.is_gpu_activity))
    rows = np.union1d(blocking_calls(trace), _queue_waits(trace, ops).rows)
    return rows[np.argsort(trace.events.start[rows], kind="stable")]


def _taken(ev: Events, rows: np.ndarray, only: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """The columns at `rows` (`only` these, if given); a column that is one value broadcast (absent from the trace) is
    left out, and Events.from_columns broadcasts it again rather than a copy of it being made."""
    columns = {}
    for name in ev.__dataclass_fields__ if only is None else only:
        column = getattr(ev, name)
        if not (len(column) and column.strides == (0,) and absent(name, column[0])):
            columns[name] = column.take(rows, axis=0)  # what column[rows] gives, 1.5-2x as fast
    return columns


@dataclass(frozen=True)
class Replayed:
    """A replayed trace and the host clock it was replayed on."""

    trace: Trace
    clock: HostClock  # the host's clock without the profiler's cost


def replay(trace: Trace, *, rows: np.ndarray | None = None, new_dur: np.ndarray | None = None,
           host_speed: float = 1.0, host_cost: HostCost | None = None, device: int | None = None,
           device_info: DeviceInfo | None = None, cut: tuple[np.ndarray, np.ndarray] | None = None,
           unblock: np.ndarray | None = None, for_steps: bool = False) -> Trace:
    """The trace as it would run with the GPU activities `rows` (sorted by start; default: all of them) taking
    `new_dur` ns (default: as measured), the host `host_speed` times as fast, and the profiler's `host_cost`
    taken out of every host event on the step's path. Returns a new Trace; with the defaults, the trace itself
    (to the nanosecond, less the GPU projections of host ranges). `for_steps`: a table for finding its steps and
    nothing else, as a what-if asks (analysis.steps: its columns, STEP_COLUMNS, and rows, step_rows; no memory)."""
    return replay_with_clock(trace, rows=rows, new_dur=new_dur, host_speed=host_speed, host_cost=host_cost,
                             device=device, device_info=device_info, cut=cut, unblock=unblock,
                             for_steps=for_steps).trace


def replay_with_clock(trace: Trace, *, rows: np.ndarray | None = None, new_dur: np.ndarray | None = None,
                      host_speed: float = 1.0, host_cost: HostCost | None = None, device: int | None = None,
                      device_info: DeviceInfo | None = None, cut: tuple[np.ndarray, np.ndarray] | None = None,
                      unblock: np.ndarray | None = None, for_steps: bool = False) -> Replayed:
    """`replay`, with the host clock it used. What-ifs: `cut`, host intervals (disjoint, sorted) the host no longer
    spends; `unblock`, rows of blocking calls that no longer wait for the device."""
    ev = trace.events
    every = _gpu_rows(trace)
    if rows is None or (len(rows) == len(every) and np.array_equal(rows, every)):
        rows = every
        ops = trace.derived("replay.device_ops", lambda: device_ops(trace, every))  # the what-ifs share it
        queue = trace.derived("replay.queue_waits", lambda: _queue_waits(trace, ops))
    else:
        ops = device_ops(trace, rows)
        queue = _queue_waits(trace, ops)
    dur = (ev.dur[rows] if new_dur is None else new_dur).astype(np.float64)
    calls = blocking_calls(trace)
    if unblock is not None and len(unblock):
        calls = calls[~np.isin(calls, unblock)]
    waits = _Waits.of(trace, calls, batch_waits(trace), queue)
    clock = host_clock(trace, host_cost or HostCost(), waits.intervals(), cut)
    # An activity is submitted `latency` after its launch call starts: the profiler's cost paid inside the call before
    # that comes out of the latency too, else the device would idle for the profiler in the replay.
    launch_at = (clock.deflate(ops.launch + ops.latency) - ops.latency) / host_speed
    wait_start = clock.deflate(waits.start) / host_speed
    wait_end = clock.deflate(waits.end) / host_speed
    new_start, state = _simulate(ops, dur, launch_at, waits, wait_start, wait_end, host_speed)
    start = ev.start.astype(np.float64)
    end = ev.end.astype(np.float64)
    host = ~trace.is_gpu_activity
    if for_steps:
        host &= step_rows(trace)  # the other rows are not carried: their times are not needed
    start[host] = _host_map(state, clock, host_speed, start[host])
    end[host] = _host_map(state, clock, host_speed, end[host])
    start[rows] = new_start
    end[rows] = new_start + dur
    keep = trace.derived("replay.kept_rows", lambda: np.flatnonzero(~ev.of_kind(*_DROPPED_KINDS)))
    if for_steps:
        keep = trace.derived("replay.kept_step_rows", lambda: keep[step_rows(trace)[keep]])
    new_starts = np.rint(start[keep]).astype(np.int64)
    new_durs = np.maximum(np.rint(end[keep]).astype(np.int64) - new_starts, 0)
    # The table's order (start, longer first; Events.from_columns), taken here so each column is copied once.
    order = start_order(new_starts, new_durs)
    taken = keep[order]
    table = _taken(ev, taken, tuple(c for c in STEP_COLUMNS if c not in ("start", "dur")) if for_steps else None)
    table["start"], table["dur"] = new_starts[order], new_durs[order]
    memory = trace.memory if not for_steps else type(trace.memory).empty()
    if len(memory):
        memory = type(memory).from_columns(**{
            **{name: getattr(memory, name) for name in memory.__dataclass_fields__},
            "time": np.rint(_host_map(state, clock, host_speed, memory.time.astype(np.float64))).astype(np.int64)})
    meta = trace.meta
    if device_info is not None and device is not None:
        meta = replace(meta, devices=tuple(device_info if d.id == device else d for d in meta.devices)
                       or (device_info,))
    # Every other part of the trace (strings, stacks, recorded op inputs) carries over as it is.
    replayed = replace(trace, meta=meta, events=Events.from_columns(**table), memory=memory)
    carry_launching_call(trace, taken, replayed)
    return Replayed(replayed, clock)
