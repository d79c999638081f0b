"""Run fuzz cases through stepscope's CLI, each in a child forked from a warm worker, under a memory limit.

    python tests/fuzz_runner.py --seed 7 --first 0 --count 1000 [--keep DIR]

prints one JSON line per case: its number, family, damage, argv, exit code (or the signal that ended it),
whether stderr holds a traceback, the child's peak RSS and its wall time. The worker imports stepscope once;
each child sets RLIMIT_AS, redirects stdout and stderr to files and calls `stepscope.cli.main` as
`python -m stepscope` would (an exception escaping it is printed as a traceback, exit 1), so a case costs
a fork and the analysis, not an interpreter start. `--keep DIR` keeps the folders of failing cases.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

MEMORY_LIMIT = 2 << 30  # RLIMIT_AS of each child: the old gunzip's 4 GiB buffer failed under it
PEAK_RSS_BOUND_MB = 600  # the bound the suite asserts on each child's peak RSS (interpreter and imports included)
TIME_LIMIT_S = 120  # SIGALRM ends a child that runs longer (a hang)
STDOUT_BOUND = 1 << 20  # what a terminal may be shown for one small trace
OK_CODES = (0, 2)  # success, or stepscope's one-line error; 1 is only `diff --fail-if-slower`


@dataclass
class Result:
    index: int
    family: str
    damage: list[str]
    argv: list[str]
    exit_code: int | None  # None when a signal ended the child
    signal: int | None
    traceback: bool
    first_error_line: str
    stdout_bytes: int
    peak_rss_mb: float
    seconds: float

    @property
    def failed(self) -> bool:
        gate = self.argv[:1] == ["diff"] and self.exit_code == 1  # the gate may fire on a mangled twin
        return (self.signal is not None or self.traceback or self.stdout_bytes > STDOUT_BOUND
                or (self.exit_code not in OK_CODES and not gate) or self.peak_rss_mb > PEAK_RSS_BOUND_MB)


def run_case(case: object, folder: Path) -> Result:
    from fuzz_inputs import Case

    assert isinstance(case, Case)
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        (folder / name).write_bytes(data)
    argv = [a.replace("{dir}", str(folder)) for a in case.argv]
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        _child(argv, folder)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - started
    err = (folder / "stderr.txt").read_text(errors="replace")
    return Result(
        index=case.index, family=case.family, damage=case.damage, argv=case.argv,
        exit_code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        traceback="Traceback (most recent call last)" in err,
        first_error_line=next((line for line in err.splitlines() if line.strip()), "")[:300],
        stdout_bytes=(folder / "stdout.txt").stat().st_size,
        peak_rss_mb=round(usage.ru_maxrss / 1024, 1), seconds=round(seconds, 3),
    )


def _child(argv: list[str], folder: Path) -> None:
    """In the forked child: limits, output to files, the CLI as `python -m stepscope` runs it; never returns."""
    code = 1
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        signal.alarm(TIME_LIMIT_S)
        for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
            target = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        from stepscope.cli import main

        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def warm_up() -> bytes:
    """Import what the CLI loads for every verb, and make the report.json the report cases mangle."""
    import builder
    from stepscope.cli import build_parser
    from stepscope.pipeline import analyze
    from stepscope.report import render
    from stepscope.report.html import HtmlRenderer  # noqa: F401
    from stepscope.report.perfetto import PerfettoRenderer  # noqa: F401
    from stepscope.report.terminal import TerminalRenderer  # noqa: F401

    build_parser(every_verb=True)
    with tempfile.TemporaryDirectory() as tmp:
        report = analyze(builder.input_bound_trace().write(Path(tmp) / "t.json"))
    return render("json", report)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--keep", type=Path, help="copy the folders of failing cases here")
    args = p.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads: one thread, so forks stay safe
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from fuzz_inputs import make_case

    report_json = warm_up()
    with tempfile.TemporaryDirectory(prefix="stepscope-fuzz-") as tmp:
        for index in range(args.first, args.first + args.count):
            case = make_case(args.seed, index, Path(tmp), report_json)
            folder = Path(tmp) / f"case-{index}"
            result = run_case(case, folder)
            if result.failed and args.keep:
                shutil.copytree(folder, args.keep / f"case-{index}", dirs_exist_ok=True)
            shutil.rmtree(folder, ignore_errors=True)
            print(json.dumps(asdict(result)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
