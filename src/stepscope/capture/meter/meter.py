"""The step meter: every step of the program measured unprofiled, from its first to its last.

It keeps the steps of every step source it sees (optimizer steps, backward passes, DataLoader batches, model
forwards, `stepscope.step()` marks) and, at the end, the ones of the source the capture counted by; it is told when
a profiler runs, so the report can take its headline from the steps before any profiler touched the process. While
the program runs it shows a line that updates (on a terminal) and keeps `meter.json` current about once a second.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stepscope.atomic import write_atomic
from stepscope.capture.arbiter import PRIORITY, Mark, StepArbiter
from stepscope.capture.guard import PID
from stepscope.capture.meter import host
from stepscope.capture.meter.bulk import replay_in_bulk
from stepscope.capture.meter.device import TIMED_PHASES, DeviceTimer, cuda_timer, nvml_busy
from stepscope.capture.meter.hooks import HOOKED, HookState, MeterHooks
from stepscope.capture.meter.live import LiveLine
from stepscope.capture.meter.phases import FIELDS, MAX_STEPS, NAMED, PhaseClock, Replayed, StepLog
from stepscope.capture.meter.workers import WorkerLog
from stepscope.errors import StepscopeError
from stepscope.model.meter import DEVICE_PHASES, PHASES, MeterRecord, MeterSteps, meter_to_json
from stepscope.model.runfolder import METER
from stepscope.stats import warming

# Sources whose mark is the start of a step (a model call ends the previous forward's step): the first one ends none.
STARTS_A_STEP = ("forward",)
LIVE_STEPS = 2_000  # the steps the live file keeps (the final file keeps all)
# Steps of the strongest source after which weaker sources are no longer kept (they cost every step; a stronger source
# seen later still takes the lead): its first. Until then every mark replays the events (8-16 µs each, a step's four
# marks ~45 µs); at 3 that was two more steps of it on the MLP's 1 ms steps.
SETTLED = 1
WRITE_EVERY_NS = 1_000_000_000
BULK_EVENTS = 64  # fewer events are replayed one by one (numpy's calls cost more than the loop)
# Steps still warming up: the latest WARMING_STEPS against the WARMING_STEPS before them (stats.warming).
WARMING_STEPS = 5


class StepMeter:
    def __init__(self, folder: Path | None, *, syncs: bool | None = None, live: bool = True,
                 clock: Callable[[], int] = time.perf_counter_ns, device: DeviceTimer | None = None,
                 busy: Callable[[], float | None] | None = None,
                 batch_size: Callable[[], int | None] | None = None, chosen: str | None = None) -> None:
        self.folder = folder
        self.chosen = chosen  # the source the user chose to count steps by (--step-on), kept whatever leads
        self.clock = PhaseClock(clock, self._on_mark)
        # The hooks replay their events (self.catch_up) at a mark at or after `mark_due`, at any event at or after
        # `due`: every mark until the leading source has settled (the weaker ones are muted then) or while a device is
        # timed (its events are recorded at the boundary), else about once a second, with the live line.
        self.state: Any = HookState()  # the hooks' state (the C hooks' replaces it at install): due, muted, device
        self.logs: dict[str, StepLog] = {}
        self.arbiter = StepArbiter()  # the one arbiter's rule: the strongest source seen so far leads (never locked)
        self._muted: set[str] = set()  # sources weaker than one that has led SETTLED steps: not kept
        self.spans: list[list[int]] = []  # when a profiler ran
        self.num_workers: int | None = None
        self._syncs = syncs
        self.state.device = device  # the device timer, once the program has used CUDA (hooks mark phases on it)
        self.device_source: str | None = None
        # NVML's busy % of the device, read once a second ([host ns, %]): the share of time a kernel ran
        self._busy = busy
        self.busy: list[list[float]] = []
        # [host ns, this process's CPU s, the machine's busy CPU s] about once a second and around the window: did
        # other processes' load change between the steps before the profiler and after it (capture/meter/host.py)
        self.host_cpu: list[list[float]] = []
        self._batch_size = batch_size or (lambda: None)
        self.thread = threading.get_ident()
        self.pid = os.getpid()
        self._hooks: MeterHooks | None = None
        self._hooks_set: str | None = None  # meter.json's `hooks`: which set measured, kept once they come off
        self._workers = WorkerLog(folder) if folder is not None else None
        self._live = LiveLine(sys.stderr) if live else None
        self._last_write = 0  # install() sets it: the first write, reading and live line come a second in
        self._written_problem = False

    # -- on and off ------------------------------------------------------------------------------------

    def install(self) -> StepMeter:
        import torch

        syncs = self._syncs if self._syncs is not None else bool(torch.cuda.is_available())
        self._hooks = MeterHooks(self, syncs=syncs)
        self._hooks.install()
        self._hooks_set = "C" if self._hooks.native is not None else "Python"
        self._read_host()
        # The first of the once-a-second work (the machine's CPU time, the live line, meter.json) a second from now,
        # not inside the program's first step, where it cost ~0.25 ms on the MLP's 1 ms step (2026-11-28). The
        # (empty) replay sets the due times from it and tells the hooks.
        self._last_write = self.clock.clock()
        self.catch_up()
        if self._workers is not None:
            self._workers.install()
        return self

    def remove(self) -> None:
        if self._hooks is not None:
            self._hooks.remove()
            self._hooks = None
            self.catch_up()  # what the hooks recorded, into the steps
        if self._workers is not None:
            self._workers.remove()
        if self._live is not None:
            self._live.close()

    def around_fetch(self, around: Callable[[object, object], object] | None) -> bool:
        """The line ranges' fetch slot (attribution/line_ranges.FetchSlot): each DataLoader fetch through `around`
        (None: plainly again); False when the layer is not installed."""
        if self._hooks is None:
            return False
        self._hooks.subscribe(around_fetch=around)
        return True

    @property
    def layer(self) -> MeterHooks | None:
        """The instrumentation layer while installed: the one set of hooks others subscribe to (capture/hooks.py's
        step detection, the line ranges' fetch) instead of patching the same points again."""
        return self._hooks

    # What the hooks read, kept in their state alone (one state for both hook sets, no copy).
    due = property(lambda self: self.state.due, lambda self, v: setattr(self.state, "due", v))
    mark_due = property(lambda self: self.state.mark_due, lambda self, v: setattr(self.state, "mark_due", v))
    device = property(lambda self: self.state.device, lambda self, v: setattr(self.state, "device", v))

    @property
    def muted(self) -> set[str]:
        return self._muted

    @muted.setter
    def muted(self, sources: set[str]) -> None:
        self._muted = sources
        self.state.muted = sum(1 << i for i, source in enumerate(HOOKED) if source in sources)

    @property
    def leading(self) -> str | None:
        """The strongest source seen so far."""
        return self.arbiter.leader

    def here(self) -> bool:
        """The training thread of the process that started the meter (not a forked worker, not another thread).
        The process is known without a system call (capture/guard.py)."""
        return PID[0] == self.pid and threading.get_ident() == self.thread

    # -- what the hooks report ---------------------------------------------------------------------------

    def catch_up(self) -> None:
        """Replay the hooks' events (steps ended, phases entered and left) into the steps: at once where numpy is
        loaded (torch loads it), no phase is open and none nests (capture/meter/bulk.py), else one by one."""
        clock, np = self.clock, sys.modules.get("numpy")
        if np is not None and len(clock.events) >= BULK_EVENTS and clock.open_only_other():
            pending = clock.take()
            replayed = replay_in_bulk(np, pending, clock.since, clock.totals)
            if replayed is None:
                clock.replay(pending)
            else:
                self._replayed(np, replayed)
        else:
            clock.catch_up()
        self.due = self._last_write + WRITE_EVERY_NS
        log = self.logs.get(self.leading) if self.leading is not None else None
        self.mark_due = self.due if self.device is None and log is not None and log.count >= SETTLED else 0

    def boundary(self, source: str) -> None:
        """A step of `source` has just ended: a mark the hooks do not see (stepscope.step(), a trainer callback)."""
        self.catch_up()
        self._boundary(source, None)

    def _replayed(self, np: object, done: Replayed) -> None:
        """A batch replayed in bulk: the settled leading source's steps appended at once, any other marks one by one
        (a switch of the lead, a weaker source not yet muted, a device to mark)."""
        source = HOOKED[done.marks[0]] if done.marks else None
        log = self.logs.get(source) if source is not None else None
        at_once = (log is not None and source == self.leading and source not in self.muted and self.device is None
                   and log.count >= SETTLED and log.count + len(done.marks) <= MAX_STEPS
                   and all(m == done.marks[0] for m in done.marks))
        if at_once:
            assert log is not None and source is not None
            log.extend(np, done.times, done.totals)
        self.clock.apply(done, marks=not at_once)
        if at_once and done.times[-1] - self._last_write >= WRITE_EVERY_NS:
            self._on_leading_step(source, log, done.times[-1])

    def _on_mark(self, index: int, t: int) -> None:
        self._boundary(HOOKED[index], t)

    def _boundary(self, source: str, t: int | None) -> None:
        if source in self.muted:
            return  # a weaker source once a stronger one has led a few steps: its steps will never be reported
        log = self.logs.get(source)
        if t is None:
            t, totals = self.clock.read()
        else:
            totals = self.clock.totals
        if log is None:
            log = self.logs[source] = StepLog()
            if source in STARTS_A_STEP:  # the first forward begins the first step; it ends none
                log.start(t, totals)
                return
            # The first step runs from the first phase entered, when every named phase's total was still 0 (not from
            # now: its phases would all be 0 and the whole step 'other').
            if self.clock.started is not None:
                log.start(self.clock.started, [0] * NAMED)
            else:
                log.start(t, totals)
        log.boundary(t, totals)
        if self.arbiter.mark(source) is Mark.IGNORE:
            return
        if log.count <= SETTLED or self.device is not None or t - self._last_write >= WRITE_EVERY_NS:
            self._on_leading_step(source, log, t)  # a call a step saved otherwise: a 1 ms step has 10 µs for all

    def _on_leading_step(self, source: str, log: StepLog, t: int) -> None:
        if log.count == SETTLED:  # from now on the weaker sources cost a set lookup, not a step each
            rank = PRIORITY.get(source, 9)
            self.muted = {s for s, r in PRIORITY.items() if r > rank and s != self.chosen}
        if self.device is None and log.count == 1:
            self.device = cuda_timer()  # CUDA is initialised by now if the program uses it
            if self.device is not None and self._busy is None:
                self._busy = nvml_busy()
        if self.device is not None:
            if self.device_source != source:
                self.device.restart()
                self.device_source = source
            self.device.boundary(log.count)
        if t - self._last_write >= WRITE_EVERY_NS:
            self._last_write = t
            busy = self._busy() if self._busy is not None else None
            if busy is not None:
                self.busy.append([t, round(busy, 1)])
            self._read_host()
            if self._live is not None:
                self._live.show(log, self._batch_size())
            self.write(done=False)

    def warming(self, source: str | None) -> bool:
        """The latest steps of `source` still get faster: the WARMING_STEPS before the last WARMING_STEPS were
        slower beyond stats.warming's rule, the pipeline's own for the headline (the session waits before it starts
        the profiler, so the steps before the window, the headline, are the job's steady step)."""
        self.catch_up()
        log = self.logs.get(source) if source else None
        if log is None or len(log.rows) // FIELDS < 2 * WARMING_STEPS or log.count > len(log.rows) // FIELDS:
            return False
        walls = log.column(1, len(log.rows) // FIELDS - 2 * WARMING_STEPS)
        return warming(walls[:WARMING_STEPS], walls[WARMING_STEPS:]) is not None

    def span(self, source: str | None) -> tuple[int, int]:
        """How long the steps of `source` after its first have run so far (from its first step's end to its last's),
        and how many they are."""
        self.catch_up()
        log = self.logs.get(source) if source else None
        if log is None or len(log.rows) < 2 * FIELDS:
            return 0, 0
        return log.rows[-FIELDS] - log.rows[0], len(log.rows) // FIELDS - 1

    def _read_host(self) -> None:
        reading = host.read()
        if reading is not None:
            self.host_cpu.append(reading)

    def profiler_started(self) -> None:
        self._read_host()  # before the span begins: the last reading before the profiler
        if not self.spans or self.spans[-1][1] >= 0:  # a window started again (without stacks) is one span
            self.spans.append([self.clock.clock(), -1])

    def profiler_stopped(self) -> None:
        self._read_host()
        if self.spans and self.spans[-1][1] < 0:
            self.spans[-1][1] = self.clock.clock()

    # -- the record ------------------------------------------------------------------------------------

    def record(self, source: str | None = None, *, done: bool = True, keep: int | None = None) -> MeterRecord:
        """What was measured, counted by `source` (default: the strongest source seen)."""
        self.catch_up()
        source = source if source in self.logs else self.leading
        log = self.logs.get(source) if source else None
        steps = MeterSteps()
        if log is not None:
            first = max(log.count - keep, 0) if keep is not None else 0
            first = min(first, len(log.rows) // FIELDS)
            names = ("end_ns", "wall_ns", *(f"{p}_ns" for p in PHASES))
            for i, name in enumerate(names):  # sliced before it becomes a list: the live file is written each second
                setattr(steps, name, log.column(i, first))
            steps.first_step = first
            timer = self.device if self.device is not None and self.device_source == source else None
            if timer is not None and timer.device_ns:
                indices = range(first + 1, first + 1 + len(steps.wall_ns))
                steps.device_ns = [timer.device_ns.get(i, -1) for i in indices]
                for phase, name in zip(TIMED_PHASES, DEVICE_PHASES, strict=True):
                    setattr(steps, f"device_{name}_ns", [timer.phase_ns[i].get(phase, 0) if i in timer.phase_ns
                                                        else -1 for i in indices])
        spans = [[a, b if b >= 0 else self.clock.clock()] for a, b in self.spans]
        return MeterRecord(
            source=source, batch_size=self._batch_size(), done=done, steps=steps, profiled_spans=spans,
            profiled=_profiled_steps(steps.end_ns, steps.wall_ns, spans, steps.first_step),
            overflow_steps=max(log.count - len(log.rows) // FIELDS, 0) if log is not None else 0,
            overflow_totals_ns=dict(zip(("wall", *PHASES), log.overflow, strict=True))
            if log is not None and log.overflow[0] else {},
            workers=self._workers.read() if done and self._workers is not None else None,
            device_timer="cuda events" if steps.device_ns else None, device_busy=[list(b) for b in self.busy],
            host_cpu=[list(r) for r in self.host_cpu],
            num_workers=self.num_workers, cpu_cores=_cores(), hooks=self._hooks_set)

    def finish(self, source: str | None) -> MeterRecord:
        """The program has ended: the hooks come off and meter.json is written whole."""
        self.remove()
        self._read_host()
        record = self.record(source, done=True)
        self._save(record, done=True)
        return record

    def write(self, *, done: bool, source: str | None = None) -> Path | None:
        """meter.json in the run folder, atomically; a live file keeps only the latest steps."""
        if self.folder is None:
            return None  # nothing to write to: the record is not built (~80 µs)
        return self._save(self.record(source, done=done, keep=None if done else LIVE_STEPS), done=done)

    def _save(self, record: MeterRecord, *, done: bool) -> Path | None:
        if self.folder is None:
            return None
        try:
            return write_atomic(self.folder / METER, meter_to_json(record), what="the step meter's record")
        except StepscopeError as exc:
            if not self._written_problem or done:
                self._written_problem = True
                print(f"stepscope: {exc.message}", file=sys.stderr)
            return None


def _profiled_steps(end_ns: list[int], wall_ns: list[int], spans: list[list[int]], first: int) -> list[int] | None:
    """[first, last] index of the steps that overlap a profiler's span (the last one overlapping, and every step
    after it is still a step 'after the window')."""
    if not spans:
        return None
    touched = [first + i for i, (end, wall) in enumerate(zip(end_ns, wall_ns, strict=True))
               if any(end - wall < b and end > a for a, b in spans)]
    return [touched[0], touched[-1]] if touched else None


def _cores() -> int | None:
    """The CPUs (hyperthreads counted) this process may run on: what DataLoader workers, processes running Python,
    share. capture/settings counts physical cores instead, for intra-op threads, where a second hyperthread adds
    little."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


__all__ = ["StepMeter"]
