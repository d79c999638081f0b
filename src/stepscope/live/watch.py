"""`stepscope watch`'s session: saves re-profile the program through the engine (debounced), each result is
compared with the previous one and the pinned baseline (the first good run until another is pinned), and the
state every front end draws (terminal, page) is one JSON-ready view, versioned, with listeners told of each change.
Batch measurements run the program again with another batch size through a second engine."""

from __future__ import annotations

import shutil
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from stepscope.live import view
from stepscope.live.compare import Changes, History
from stepscope.live.engine import (
    Debouncer,
    Event,
    Finished,
    FirstFigures,
    Progress,
    Reprofiler,
    Result,
    Started,
    Target,
)
from stepscope.live.files import FileWatcher, watched_files
from stepscope.model.batches import BatchSizes, batch_problem
from stepscope.model.report import Report

DEBOUNCE_S = 0.3
FILES_TTL_S = 2.0
NOTES_KEPT = 3  # the last few one-line notes (a page client that reset, ...) shown under the view


@dataclass(frozen=True)
class BatchFlag:
    """How the program takes its batch size on its command line: `--batch-size 64` or `--batch-size=64`."""

    flag: str

    def apply(self, argv: tuple[str, ...], batch: int) -> tuple[str, ...]:
        out, i, found = [], 0, False
        while i < len(argv):
            arg = argv[i]
            if arg == self.flag and i + 1 < len(argv):
                out += [arg, str(batch)]
                i, found = i + 2, True
                continue
            if arg.startswith(self.flag + "="):
                out.append(f"{self.flag}={batch}")
                found = True
            else:
                out.append(arg)
            i += 1
        return tuple(out if found else [*out, self.flag, str(batch)])


class WatchSession:
    def __init__(self, target: Target, workdir: Path, *, script: Path | None, batch_flag: BatchFlag | None = None,
                 debounce_s: float = DEBOUNCE_S, polling: bool | None = None) -> None:
        self.target, self.script, self.batch_flag = target, script, batch_flag
        self._lock = threading.Lock()
        self._listeners: list[Callable[[int], None]] = []
        self.version = 0
        self.runs: dict[int, dict] = {}  # run_id -> what the view shows of it while it runs
        # The last good result, the one before it, the pinned baseline, and the current one's changes.
        self.history: History[Result] = History(_report_of)
        self.failed: Result | None = None  # the last result, when it failed
        self.model: BatchSizes | None = None  # the current result's batch sizes (its Report's)
        self.saved_at: float | None = None  # monotonic time of the save behind the run in flight
        self.trigger: str = "start"
        self.notes: deque[str] = deque(maxlen=NOTES_KEPT)
        self.measurements: dict[int, dict] = {}  # batch size -> a measurement's state and figures
        self._measure_runs: dict[int, int] = {}  # measure engine's run_id -> batch size
        self.engine = Reprofiler(target, on_event=self._on_event, workdir=workdir / "runs")
        self.measurer = Reprofiler(target, on_event=self._on_measure, workdir=workdir / "batches")
        self._debounce = Debouncer(debounce_s, self._resubmit)
        self._listed: tuple[float, object, set[Path]] | None = None
        self.watcher = FileWatcher(self._files, self.saved, polling=polling)

    # -- driving
    def start(self) -> None:
        self.watcher.start()
        self._resubmit()

    def close(self) -> None:
        self._debounce.cancel()
        self.watcher.stop()
        self.engine.close()
        self.measurer.close()

    @property
    def current(self) -> Result | None:
        return self.history.current

    @property
    def baseline(self) -> Result | None:
        return self.history.baseline

    @property
    def changes(self) -> Changes | None:
        return self.history.changes

    def saved(self, path: Path) -> None:
        """A watched file was written: re-profile once the saves settle."""
        with self._lock:
            self.saved_at, self.trigger = time.monotonic(), f"saved {path.name}"
        self._debounce()

    def pin(self) -> None:
        """The current result becomes the baseline the next ones are compared with."""
        with self._lock:
            self.history.pin()
        self._changed()

    def measure(self, batch: int) -> str | None:
        """Run the program with `batch` samples per step; None when started, else why it cannot be."""
        if self.batch_flag is None:
            return "the batch size is not settable: give watch --batch-flag (e.g. --batch-flag=--batch-size)"
        if problem := batch_problem(batch):
            return problem
        argv = self.batch_flag.apply(self.target.argv, batch)
        self.measurer.target = Target(argv, self.target.cwd, self.target.run_options, self.target.env)
        run_id = self.measurer.submit()  # one measurement at a time: a new one replaces the one in flight
        with self._lock:
            for state in self.measurements.values():
                if state.get("state") == "running":
                    state["state"] = "cancelled"
            self._measure_runs[run_id] = batch
            # A measurement stands beside the predictions of the code it ran: the current result's.
            self.measurements[batch] = {"state": "running", "for_run": self.current.run_id if self.current else None}
        self._changed()
        return None

    def note(self, text: str) -> None:
        """A one-line note under the view: what went wrong outside a run (a page request), never a traceback."""
        with self._lock:
            self.notes.append(" ".join(text.split()))
        self._changed()

    def listen(self, listener: Callable[[int], None]) -> None:
        self._listeners.append(listener)

    def snapshot(self) -> dict:
        """The view, JSON-ready (view.View as plain values)."""
        with self._lock:
            return msgspec.to_builtins(view.build(self))

    # -- engine events (on the engine's threads)
    def _resubmit(self) -> None:
        self.engine.submit()

    def _files(self) -> set[Path]:
        """What to watch, listed again at most every FILES_TTL_S (a poll asks four times a second)."""
        now = time.monotonic()
        report = self.current.report if self.current else None
        if self._listed is None or now - self._listed[0] > FILES_TTL_S or self._listed[1] is not report:
            self._listed = (now, report, watched_files(self.script, self.target.cwd, report))
        return self._listed[2]

    def _on_event(self, event: Event) -> None:
        with self._lock:
            run = self.runs.setdefault(event.run_id, {"saved_at": self.saved_at, "trigger": self.trigger,
                                                      "started": time.monotonic()})
            if isinstance(event, Started):
                for rid in list(self.runs):  # older runs in flight were cancelled by this one
                    if rid < event.run_id and self.runs[rid].get("state") == "running":
                        del self.runs[rid]
                run["state"] = "running"
                self.saved_at = None
            elif isinstance(event, Progress):
                run["progress"] = event.text
            elif isinstance(event, FirstFigures):
                run["first"] = event
                run["first_at"] = time.monotonic()
            elif isinstance(event, Finished):
                run["state"], run["finished_at"] = "finished", time.monotonic()
                self._finished(event.result)
                self._prune()
        self._changed()

    def _finished(self, result: Result) -> None:
        if result.report is None or result.error:
            self.failed = result
            return
        self.failed = None
        self.history.add(result)
        self.model = result.report.batch_sizes

    def _prune(self) -> None:
        """Run folders of results nobody shows any more go (a long session would fill the disk with traces); the
        current, previous and baseline runs' stay, and any newer one (in flight)."""
        keep = {r.run_id for r in (*self.history.runs(), *((self.failed,) if self.failed else ()))}
        newest = max(self.runs, default=0)
        for path in self.engine.workdir.glob("run-*"):
            number = path.name.removeprefix("run-").split(".")[0]
            if number.isdigit() and int(number) not in keep and int(number) < newest:
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)

    def _on_measure(self, event: Event) -> None:
        if not isinstance(event, Finished):
            return
        with self._lock:
            batch = self._measure_runs.get(event.run_id)
            if batch is None:
                return
            r, state = event.result, self.measurements[batch]
            if r.report is None or r.error:
                state.update(state="failed", error=r.error or "no report")
            else:
                s = r.report.summary
                peak = max((m.peak_allocated_bytes for m in r.report.memory), default=None)
                state.update(state="measured", step_us=s.step_time_us, samples_per_s=s.samples_per_s,
                             peak_bytes=peak)
        self._changed()

    def _changed(self) -> None:
        with self._lock:
            self.version += 1
            version = self.version
        for listener in list(self._listeners):
            listener(version)


def _report_of(result: Result) -> Report:
    assert result.report is not None  # only good results enter the history
    return result.report
