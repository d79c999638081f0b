"""Running one child process for a trial: spec file in, result file out, its output in a log, a time limit.

The child runs in its own session (process group), so Ctrl-C at the terminal reaches only the tune, which then
ends the child and whatever it started (DataLoader workers) by that group's id.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

from stepscope.tune.wire import ChildResult, TrialSpec, decode_result, encode

KILL_GRACE_S = 5.0
OOM_MARKERS = ("out of memory", "OutOfMemoryError")


@dataclass(frozen=True)
class ChildRun:
    result: ChildResult | None
    returncode: int | None  # None: killed at its time limit
    wall_s: float
    log: Path
    problem: str  # "" when the child measured (or profiled); else why not, in a few words
    status: str  # measured | profiled | slower | crashed | out of memory | timed out | no steps | too few steps
    # | stepscope failed (its own patch, not the program)


def child_env(seed: int) -> dict[str, str]:
    """The parent's environment, with this stepscope first on the path and the hash seed fixed."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    env["PYTHONHASHSEED"] = str(seed)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_child(spec: TrialSpec, folder: Path, name: str, timeout_s: float) -> ChildRun:
    """Run the child for `spec` (its result goes to folder/NAME.json, its output to folder/NAME.log)."""
    folder.mkdir(parents=True, exist_ok=True)
    result_path, log = folder / f"{name}.json", folder / f"{name}.log"
    spec = msgspec.structs.replace(spec, result=str(result_path))
    spec_path = folder / f"{name}.spec.json"
    spec_path.write_bytes(encode(spec))
    result_path.unlink(missing_ok=True)
    start = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "stepscope.tune.child", str(spec_path)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env(spec.seed),
                                start_new_session=True)
        try:
            returncode: int | None = proc.wait(timeout=max(timeout_s, 1.0))
        except subprocess.TimeoutExpired:
            returncode = None
        except BaseException:  # Ctrl-C or SIGTERM in the tune: end the child with it
            end_group(proc)
            raise
        finally:
            end_group(proc)
    wall = time.monotonic() - start
    result = _read(result_path)
    return _classify(result, returncode, wall, log, timeout_s)


def end_group(proc: subprocess.Popen) -> None:
    """Terminate the child's process group (it, and the workers it started), killing what outlives the grace."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 1.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if not _group_alive(proc.pid):
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _read(path: Path) -> ChildResult | None:
    try:
        return decode_result(path.read_bytes())
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def _classify(result: ChildResult | None, returncode: int | None, wall: float, log: Path,
              timeout_s: float) -> ChildRun:
    if returncode is None:
        return ChildRun(result, None, wall, log, f"timed out after {timeout_s:.0f} s", "timed out")
    if result is None:
        why = f"killed by signal {-returncode}" if returncode < 0 else f"exited with code {returncode}"
        last = _last_line(log)
        status = "out of memory" if returncode == -signal.SIGKILL or _oom(last) else "crashed"
        return ChildRun(None, returncode, wall, log, f"the process {why} without a result{': ' + last if last else ''}",
                        status)
    if result.status in ("measured", "profiled"):
        return ChildRun(result, returncode, wall, log, "", result.status)
    if result.status == "patch failed":
        return ChildRun(result, returncode, wall, log, f"{result.detail} (stepscope's own failure, not the "
                        "program's: the fix is left untried)", "stepscope failed")
    if result.status == "failed":
        status = "out of memory" if _oom(result.detail) else "crashed"
        return ChildRun(result, returncode, wall, log, f"the program {result.detail or 'failed'}", status)
    if result.status == "no steps":
        return ChildRun(result, returncode, wall, log, "no training step was detected", "no steps")
    if result.status == "too few steps":
        return ChildRun(result, returncode, wall, log,
                        f"the program ran only {result.steps_completed} steps: let it run longer "
                        "(more steps or epochs), or lower --trial-steps", "too few steps")
    return ChildRun(result, returncode, wall, log, "", result.status)  # "slower": judged by the ladder


def _oom(text: str) -> bool:
    return any(marker in text for marker in OOM_MARKERS)


def _last_line(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""
