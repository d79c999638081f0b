"""`stepscope watch`'s speed (issue 31): save -> first figures and save -> full per-line view, on examples, beside
the time the plain program takes to run the same steps (`python script.py --steps N`, start-up included).

    .venv/bin/python benchmarks/bench_watch.py                      # 2 examples, 2 saves each
    .venv/bin/python benchmarks/bench_watch.py --saves 3 --examples pattern_launch_bound

Each example is copied into a temporary folder and watched with watch's defaults (the session `stepscope watch`
runs, no terminal); each "save" rewrites the copy with one more comment line. The targets: first figures within
5 s of the program's first steps, the full view within the window's time + 2 s. Run with OMP_NUM_THREADS=1 and
say the machine's load: the figures are wall times."""

from __future__ import annotations

import argparse
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


def watch_saves(script: Path, options: tuple[str, ...], saves: int) -> list[tuple[float, float]]:
    """(save -> first figures, save -> full view) in seconds, per save after the first run."""
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
            run = session.runs[session.current.run_id]  # type: ignore[union-attr]
            out.append((run["first_at"] - saved, run["finished_at"] - saved))
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
    print(f"{'example':28} {'plain run':>10} {'first figs':>11} {'full view':>10} {'view - plain':>13}")
    for name in args.examples.split(","):
        with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
            script = Path(shutil.copy(EXAMPLES / f"{name}.py", tmp))
            results = watch_saves(script, options, args.saves)
            plain = plain_run(script, steps)
            for first, full in results:
                print(f"{name:28} {plain:9.2f}s {first:10.2f}s {full:9.2f}s {full - plain:+12.2f}s")


if __name__ == "__main__":
    main()
