"""Where a whole `stepscope analyze TRACE` process spends its time, phase by phase: the interpreter's start-up,
the verb's imports, the read, the analyses, the advice, the Report object, the rendering (the renderable built and
drawn by rich), what is left inside `main`, and the exit.

Run as a script it is the measured child: the CLI's own road (`process.for_reading`, `cli.main`, `process.before_exit`)
with timers wrapped around the pipeline's steps, its terminal report written to /dev/null, one JSON line on stderr.
Only the standard library is imported before the CLI, so the start-up measured is the interpreter's and site's.
The parent (`phases`) passes its clock at the spawn in BENCH_PHASES_T0: `time.perf_counter` is the system's
monotonic clock on Linux, the same in both processes.
"""

from __future__ import annotations

import os
import sys
import time

_T0 = float(os.environ.get("BENCH_PHASES_T0", "nan"))
_STARTED = time.perf_counter(), time.process_time()

# the phases in order, as printed; "start-up" and "exit" are timed by the parent's clock
PHASES = ("start-up", "imports", "read", "analyses", "advice", "report object", "rendering", "other", "exit")


def _child(trace: str) -> None:
    import contextlib
    import json

    spent: dict[str, list[float]] = {}

    def timed(owner: object, name: str, phase: str) -> None:
        fn = getattr(owner, name)  # an AttributeError here means the CLI's road changed: update this list

        def run(*args: object, **kwargs: object) -> object:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                got = spent.setdefault(phase, [0.0, 0.0])
                got[0] += time.perf_counter() - wall
                got[1] += time.process_time() - cpu

        setattr(owner, name, run)

    from stepscope import cli, process

    verb_module = cli._verb_module

    def loaded(name: str) -> object:
        wall, cpu = time.perf_counter(), time.process_time()
        module = verb_module(name)
        spent["imports"] = [time.perf_counter() - wall, time.process_time() - cpu]
        import rich.console

        import stepscope.commands.analyze as command
        import stepscope.pipeline.flow as flow
        import stepscope.pipeline.timeline as timeline

        timed(flow, "read_trace", "read")
        timed(timeline, "compute_facts", "analyses")
        timed(flow, "advise", "advice")
        timed(flow.assemble, "report", "report object")
        timed(command, "render", "rendering")  # the renderable built ...
        timed(rich.console.Console, "print", "rendering")  # ... and drawn
        return module

    cli._verb_module = loaded
    sys.argv = ["stepscope", "analyze", trace]
    wall, cpu = time.perf_counter(), time.process_time()
    process.for_reading()
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        code = cli.main()
    process.before_exit()
    inside = time.perf_counter() - wall, time.process_time() - cpu
    spent["other"] = [inside[0] - sum(w for w, _ in spent.values()), inside[1] - sum(c for _, c in spent.values())]
    print(json.dumps({"code": code, "spent": spent, "started": _STARTED[0] - _T0, "start_cpu": _STARTED[1],
                      "ended": time.perf_counter() - _T0}), file=sys.stderr)


def phases(python: str, trace: str, src: str, runs: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU seconds per phase over `runs` fresh child processes (after one untimed)."""
    import json
    import statistics
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))
    got: dict[str, list[tuple[float, float]]] = {p: [] for p in PHASES}
    for i in range(-1, runs):
        env["BENCH_PHASES_T0"] = repr(t0 := time.perf_counter())
        done = subprocess.run([python, __file__, trace], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
        total = time.perf_counter() - t0
        lines = done.stderr.strip().splitlines()
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"phases of `stepscope analyze {trace}` failed (exit {done.returncode}):\n"
                               f"{done.stderr[-3000:]}")
        measured = json.loads(lines[-1])
        if measured["code"] != 0:
            raise RuntimeError(f"`stepscope analyze {trace}` exited {measured['code']}:\n{done.stderr[-3000:]}")
        if i < 0:  # bytecode written, files in the page cache
            continue
        got["start-up"].append((measured["started"], measured["start_cpu"]))
        for phase, (wall, cpu) in measured["spent"].items():
            got[phase].append((wall, cpu))
        got["exit"].append((total - measured["ended"], float("nan")))
    return {p: {"wall_s": statistics.median(w for w, _ in v), "cpu_s": statistics.median(c for _, c in v)}
            for p, v in got.items() if v}


def print_phases(split: dict[str, dict[str, float]] | None, runs: int) -> None:
    if split is None:  # --phase-runs 0
        return
    total = sum(v["wall_s"] for v in split.values())
    cells = ", ".join(f"{p} {v['wall_s']:.3f}" for p, v in split.items())
    print(f"`stepscope analyze` by phase (wall s, median of {runs} fresh processes): {cells} (sum {total:.3f}); "
          f"1-min load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    _child(sys.argv[1])
