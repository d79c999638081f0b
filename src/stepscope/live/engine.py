"""The live engine: re-profile an unmodified program in a fresh subprocess (`stepscope run` on a short window),
one capture at a time, each new submit cancelling the one in flight; events say how each capture goes.

Every front end (`stepscope watch`, its page, the language server) drives one `Reprofiler` and debounces saves
with `Debouncer`. A cancelled capture's process group is killed and it sends no further event."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

from stepscope import stats
from stepscope.lifeline import for_child as lifeline_for_child
from stepscope.model import runfile
from stepscope.model.meter import PHASES, MeterRecord, meter_problem
from stepscope.model.report import Report, from_json
from stepscope.model.runfolder import METER, REPORT_JSON

LOG = "output.log"  # the child's stdout and stderr, beside (not inside) its run folder
POLL_S = 0.1  # how often a capture's folder is looked at for the meter's first figures
KILL_WAIT_S = 5.0


# The one live window, as `stepscope run`'s options (watch's defaults are these, parsed: commands/live_window.py): a
# short window, the first figures quickly, lines and modules from three recorded steps. One recorded pass (no timing
# pass) halves the capture; memory is profiled for the per-line memory and the batch control's model. No calibration
# of the profiler's cost (1-3 s): the step meter measures the job itself, and the replay sizes the default cost per
# event to the gap between the recorded steps and the meter's.
LIVE_WINDOW = ("--skip", "3", "--warmup", "1", "--steps", "3", "--reference-steps", "5", "--profile-memory",
               "--no-timing-pass", "--no-calibrate")


@dataclass(frozen=True)
class Target:
    """What to re-profile: the program (script and arguments, or "-m", module, arguments) and where it runs."""

    argv: tuple[str, ...]
    cwd: Path
    run_options: tuple[str, ...] = LIVE_WINDOW  # `stepscope run`'s options
    env: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Result:
    """One finished capture: its run folder and report, or one line saying why there is none."""

    run_id: int
    folder: Path
    report: Report | None
    error: str | None
    started: float  # time.monotonic() stamps
    first_figures: float | None
    finished: float


@dataclass(frozen=True)
class Started:
    run_id: int
    command: tuple[str, ...]


@dataclass(frozen=True)
class Progress:
    run_id: int
    text: str


@dataclass(frozen=True)
class FirstFigures:
    run_id: int
    step_ms: float
    samples_per_s: float | None
    phases: dict[str, float]  # share of the step per phase (the meter's, else the report's breakdown)
    source: str  # "meter" | "report"


@dataclass(frozen=True)
class Finished:
    run_id: int
    result: Result


Event = Started | Progress | FirstFigures | Finished


class Debouncer:
    """Calls `action` once `delay_s` has passed without another call; thread-safe."""

    def __init__(self, delay_s: float, action: Callable[[], object]) -> None:
        self._delay, self._action = delay_s, action
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def __call__(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self._delay, self._action)
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


class _Capture:
    """One child process and the thread that follows it."""

    def __init__(self, run_id: int, proc: subprocess.Popen[bytes], folder: Path, started: float) -> None:
        self.run_id, self.proc, self.folder, self.started = run_id, proc, folder, started
        self.cancelled = threading.Event()
        self.first_figures: float | None = None
        self.finished = False  # its result has been sent
        self.tail: deque[str] = deque(maxlen=40)
        self.thread: threading.Thread | None = None


class Reprofiler:
    """Captures of `target`, one at a time, in run folders under `workdir`; events go to `on_event` (called on the
    engine's threads: a front end hands them to its own loop)."""

    def __init__(self, target: Target, *, on_event: Callable[[Event], None], workdir: Path) -> None:
        self.target, self._emit, self.workdir = target, on_event, Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._run_id = 0
        self._current: _Capture | None = None  # the capture in flight, until its result is sent
        self._live: set[_Capture] = set()  # every child not yet reaped (a finished one may still write its pages)
        self._closed = False

    def command(self, folder: Path) -> list[str]:
        return [sys.executable, "-m", "stepscope", "run", "-o", str(folder), "-f", *self.target.run_options,
                "--", *self.target.argv]

    def submit(self) -> int:
        """Start a capture; one in flight is cancelled first. Returns the new capture's run_id."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the Reprofiler is closed")
            for old in list(self._live):  # the one in flight, and any still writing its pages after its result
                self._stop(old)
            self._run_id += 1
            run_id = self._run_id
            folder = self.workdir / f"run-{run_id}"
            shutil.rmtree(folder, ignore_errors=True)
            cmd = self.command(folder)
            env = dict(os.environ if self.target.env is None else self.target.env)
            env.setdefault("PYTHONUNBUFFERED", "1")
            lifeline, entry = lifeline_for_child()  # the child ends when this process does, however it ends
            env.update(entry)
            # A session of its own: cancelling kills the whole group (DataLoader workers, anything the program
            # started), and the terminal's Ctrl-C reaches only the front end, which then closes us.
            proc = subprocess.Popen(cmd, cwd=self.target.cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                    pass_fds=(lifeline,))
            capture = _Capture(run_id, proc, folder, time.monotonic())
            self._current = capture
            self._live.add(capture)
            capture.thread = threading.Thread(target=self._follow, args=(capture,), daemon=True,
                                              name=f"stepscope-live-{run_id}")
        self._emit(Started(run_id, tuple(cmd)))
        capture.thread.start()
        return run_id

    def cancel(self) -> None:
        """Kill the capture in flight, if any (it sends no further event)."""
        with self._lock:
            self._stop(self._current)
            self._current = None

    def close(self) -> None:
        """Cancel and wait: no child process is left behind."""
        with self._lock:
            self._closed = True
            self._current = None
            captures = list(self._live)
            for capture in captures:
                self._stop(capture)
        for capture in captures:
            if capture.thread is not None and capture.thread is not threading.current_thread():
                capture.thread.join(KILL_WAIT_S)

    def _stop(self, capture: _Capture | None) -> None:
        if capture is None:
            return
        capture.cancelled.set()
        if capture.proc.poll() is None:
            _kill_group(capture.proc)

    def _follow(self, capture: _Capture) -> None:
        """Read the child's output, look for the first figures, and report the result as soon as report.json is
        written (the child goes on writing report.txt and report.html, conveniences nobody here waits for)."""
        reader = threading.Thread(target=self._read_output, args=(capture,), daemon=True)
        reader.start()
        report_file = capture.folder / REPORT_JSON
        while capture.proc.poll() is None and not capture.cancelled.is_set() and not report_file.is_file():
            if capture.first_figures is None:
                self._first_figures_from_meter(capture)
            time.sleep(POLL_S)
        if not report_file.is_file():  # it ended (or was cancelled) without a report: its output says why
            capture.proc.wait()
            reader.join(KILL_WAIT_S)
        if not capture.cancelled.is_set():
            self._report(capture)
        capture.proc.wait()
        _kill_group(capture.proc)  # what the program left running in its group (a worker, a server) goes too
        reader.join(KILL_WAIT_S)
        with self._lock:
            self._live.discard(capture)

    def _report(self, capture: _Capture) -> None:
        report, error = _load_report(capture.folder)
        if error is None and report is not None and not report.summary.step_time_us:
            error = "no steps were recorded: " + (report.run.status if report.run else "the trace has none")
        if report is None or error is not None:
            error = error if report is not None else _why_failed(capture)
        if report is not None and capture.first_figures is None and report.summary.step_time_us:
            capture.first_figures = time.monotonic()
            self._send(capture, _figures_from_report(capture.run_id, report))
        result = Result(capture.run_id, capture.folder, report, error, capture.started, capture.first_figures,
                        time.monotonic())
        with self._lock:
            if self._current is capture:
                self._current = None
        self._send(capture, Finished(capture.run_id, result))
        capture.finished = True

    def _send(self, capture: _Capture, event: Event) -> None:
        """Nothing after a cancel, nor after the result (the child's last lines of output)."""
        if not capture.cancelled.is_set() and not capture.finished:
            self._emit(event)

    def _read_output(self, capture: _Capture) -> None:
        assert capture.proc.stdout is not None
        with open(self.workdir / f"run-{capture.run_id}.{LOG}", "wb") as log:
            for raw in capture.proc.stdout:
                log.write(raw)
                line = raw.decode(errors="replace").rstrip()
                if line.strip():
                    capture.tail.append(line)
                if line.startswith("stepscope:"):
                    self._send(capture, Progress(capture.run_id, line[len("stepscope:"):].strip()))

    def _first_figures_from_meter(self, capture: _Capture) -> None:
        figures = meter_figures(capture.run_id, capture.folder / METER)
        if figures is not None:
            capture.first_figures = time.monotonic()
            self._send(capture, figures)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (it leads its own session) and reap the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()


def _load_report(folder: Path) -> tuple[Report | None, str | None]:
    path = folder / REPORT_JSON
    if not path.is_file():
        return None, None
    try:
        return from_json(path.read_bytes()), None
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        return None, f"{path}: not a stepscope report ({exc})"


def _why_failed(capture: _Capture) -> str:
    """One line: stepscope's own error, else the program's last line (its exception), else the exit status."""
    lines = list(capture.tail)
    for line in reversed(lines):
        if line.startswith("stepscope: error:"):
            return line[len("stepscope: "):]
    code = capture.proc.returncode
    last = next((ln.strip() for ln in reversed(lines) if not ln.startswith("stepscope:")), "")
    return last or f"the capture ended with exit status {code} and no report"


def meter_figures(run_id: int, path: Path) -> FirstFigures | None:
    """The step meter's figures (meter.json, read as the run folder's other readers read it: model/runfile.py into
    its struct, its bounds checked) once it has an unprofiled step past the program's first (its start-up): the
    median step (stats.median), samples/s, and each phase's median share of it. A quick look while the program runs;
    the Report's figures replace it a moment later (`_figures_from_report`): the live layer loads nothing of the
    analysis (tests/test_layers.py), and the pipeline's selection of the headline's steps would bring it."""
    try:
        meter = runfile.load(path, MeterRecord, meter_problem)
    except runfile.RunFileError:
        return None  # a live file caught half-written, or not one: the report will say
    if meter is None:
        return None
    steps = meter.steps
    first = steps.first_step
    profiled = meter.profiled or [-1, -2]
    keep = [i for i in range(len(steps.wall_ns))
            if first + i > 0 and not profiled[0] <= first + i <= profiled[1]]
    if not keep:
        return None
    step = stats.median([steps.wall_ns[i] for i in keep])
    if step <= 0:
        return None
    phases: dict[str, float] = {}
    for name in PHASES:
        values = getattr(steps, f"{name}_ns")
        if values and (median := stats.median([values[i] for i in keep])) > 0:
            phases[name] = median / step
    phases["other"] = max(0.0, 1.0 - sum(phases.values()))
    batch = meter.batch_size
    return FirstFigures(run_id, step / 1e6, batch * 1e9 / step if batch else None, phases, "meter")


def _figures_from_report(run_id: int, report: Report) -> FirstFigures:
    """The headline and the phases: the report's meter section (a report written with the step meter), else its
    breakdown."""
    s = report.summary
    meter = getattr(report, "meter", None)
    if meter is not None and getattr(meter, "phases", None):
        shares = {p.name: p.share for p in meter.phases}
    else:
        total = sum(s.breakdown_us.values()) or 1.0
        shares = {k: v / total for k, v in s.breakdown_us.items()}
    return FirstFigures(run_id, (s.step_time_us or 0.0) / 1e3, s.samples_per_s, shares, "report")
