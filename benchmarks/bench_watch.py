"""`stepscope watch`'s speed (issue 31): save -> first figures and save -> full per-line view, on examples, beside
the time the plain program takes to run the same steps (`python script.py --steps N`, start-up included).

    .venv/bin/python benchmarks/bench_watch.py                      # 2 examples, 2 saves each
    .venv/bin/python benchmarks/bench_watch.py --saves 3 --examples pattern_launch_bound

With the step meter, the last column is the time from the end of the program's first step (meter.json's host
clock, the same monotonic clock as this process's) to the first figures on show.

Each example is copied into a temporary folder and watched with watch's defaults (the session `stepscope watch`
runs, no terminal); each "save" rewrites the copy with one more comment line. The targets: first figures within
5 s of the program's first steps, the full view within the window's time + 2 s. Run with OMP_NUM_THREADS=1 and
say the machine's load: the figures are wall times."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from stepscope.cli import build_parser
from stepscope.commands.watch import run_options
from stepscope.live.engine import Target
from stepscope.live.watch import WatchSession

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def window_steps(options: tuple[str, ...]) -> int:
    """Steps the capture runs: skip + warm-up + recorded + reference steps."""
    value = dict(zip(options[::2], options[1::2], strict=False))
    return sum(int(value[k]) for k in ("--skip", "--warmup", "--steps", "--reference-steps"))


def plain_run(script: Path, steps: int) -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, str(script), "--steps", str(steps)], cwd=script.parent, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - start


def first_step_end(folder: Path) -> float | None:
    """When the program's first step ended, on this process's monotonic clock: the step meter's host clock
    (perf_counter_ns, CLOCK_MONOTONIC on Linux as time.monotonic is); None without meter.json."""
    try:
        steps = json.loads((folder / "meter.json").read_bytes())["steps"]
        return steps["end_ns"][0] / 1e9 if steps.get("first_step", 0) == 0 and steps["end_ns"] else None
    except (OSError, ValueError, KeyError, IndexError):
        return None


def watch_saves(script: Path, options: tuple[str, ...], saves: int) -> list[tuple[float, float, float | None]]:
    """(save -> first figures, save -> full view, the program's first step -> first figures) in seconds, per save
    after the first run."""
    folder = script.parent
    session = WatchSession(Target((script.name, "--steps", "40"), folder, options), folder / "work", script=script,
                           polling=False)
    finished = threading.Event()
    session.listen(lambda v: finished.set() if session.current is not None else None)
    session.start()
    out = []
    try:
        if not _wait(session, 1):
            raise SystemExit(f"{script.name}: the first run failed: {session.failed}")
        for n in range(saves):
            saved = time.monotonic()
            script.write_text(script.read_text() + f"# save {n}\n")
            if not _wait(session, n + 2):
                raise SystemExit(f"{script.name}: run {n + 2} failed: {session.failed}")
            current = session.current
            assert current is not None
            run = session.runs[current.run_id]
            first_step = first_step_end(current.folder)
            out.append((run["first_at"] - saved, run["finished_at"] - saved,
                        None if first_step is None else run["first_at"] - first_step))
    finally:
        session.close()
    return out


def _wait(session: WatchSession, run_id: int, timeout: float = 180) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if session.current is not None and session.current.run_id >= run_id:
            return True
        if session.failed is not None and session.failed.run_id >= run_id:
            return False
        time.sleep(0.05)
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", default="pattern_launch_bound,pattern_cpu_compute_bound")
    parser.add_argument("--saves", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    options = run_options(build_parser("watch").parse_args(["watch", "x.py"]))
    steps = window_steps(options)
    print(f"watch's capture: {' '.join(options)} ({steps} steps); load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    print(f"{'example':28} {'plain run':>10} {'first figs':>11} {'full view':>10} {'view - plain':>13} "
          f"{'1st step -> figs':>17}")
    for name in args.examples.split(","):
        with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
            script = Path(shutil.copy(EXAMPLES / f"{name}.py", tmp))
            results = watch_saves(script, options, args.saves)
            plain = plain_run(script, steps)
            for first, full, after_step in results:
                since = "-" if after_step is None else f"{after_step:.2f}s"
                print(f"{name:28} {plain:9.2f}s {first:10.2f}s {full:9.2f}s {full - plain:+12.2f}s {since:>17}")


if __name__ == "__main__":
    main()
