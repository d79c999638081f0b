"""bench_analyze.py's other measurements: where stepscope's time goes (imports, the read, each analysis section),
and the generated 1 GB trace. Standard library only at module level, like bench_analyze (HTA's venv runs it).
"""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"  # git-ignored: the generated big traces
BIG_MEMORY_TARGET = 0.6  # stepscope's peak / the JSON's size, at most
BIG_SPEED_TARGET = 8.0  # HTA seconds / stepscope seconds, at least
WHOLE_SPEED_TARGET = 6.0  # HTA's whole process / `stepscope analyze TRACE`'s whole process, at least
# HTA's side of the whole-process race: its import, its load, the temporal and idle-time breakdowns (as _child_hta).
HTA_SCRIPT = ("import sys\nfrom hta.trace_analysis import TraceAnalysis\n"
              "analyzer = TraceAnalysis(trace_dir=sys.argv[1])\nanalyzer.get_temporal_breakdown(visualize=False)\n"
              "analyzer.get_idle_time_breakdown(ranks=sorted(analyzer.t.traces), visualize=False)\n")


def big_trace(gigabytes: float) -> tuple[Path, int, int]:
    """The generated trace of about `gigabytes` GB of JSON (made once, then kept in benchmarks/.cache/), with its
    JSON size and event count."""
    path = CACHE / f"v100_x{gigabytes:g}gb.json.gz"
    meta = path.with_suffix(".meta")
    if not (path.exists() and meta.exists()):
        CACHE.mkdir(exist_ok=True)
        print(f"generating {path.name} (once; a minute or so) ...", file=sys.stderr, flush=True)
        sys.path.insert(0, str(HERE))
        from big_trace import make

        size, events = make(path, gigabytes)
        meta.write_text(json.dumps({"json_bytes": size, "events": events}))
    info = json.loads(meta.read_text())
    return path, info["json_bytes"], info["events"]


def child_count(trace: Path) -> dict[str, Any]:
    """Number of entries in the file's traceEvents list (in a child, to keep the parent's RSS small)."""
    return {"events": count_events(trace)}


def count_events(trace: Path) -> int:
    import gzip

    data = trace.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        import msgspec
    except ImportError:
        return len(json.loads(data).get("traceEvents") or [])

    # An event struct with no fields: the decoder skips every key of every event, building nothing.
    skip = msgspec.defstruct("Skip", [])
    file = msgspec.defstruct("File", [("traceEvents", list[skip], msgspec.field(default_factory=list))])
    return len(msgspec.json.decode(data, type=file).traceEvents)


def child_read(trace: Path) -> dict[str, Any]:
    """The reader alone (gunzip, msgspec decode, columns), then the analyses on its output, in one process."""
    from bench_analyze import _peak_kb as peak_kb
    from bench_analyze import _rss_now_kb as rss_now_kb
    from bench_analyze import _status_kb as status_kb

    t0 = time.perf_counter()
    from stepscope import analyze
    from stepscope.trace.kineto import read_kineto

    import_s = time.perf_counter() - t0
    rss_import_kb = rss_now_kb()
    t0, c0 = time.perf_counter(), time.process_time()
    parsed = read_kineto(trace)
    seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    peak_read_kb, hwm_read_kb = peak_kb(), status_kb("VmHWM")
    t0 = time.perf_counter()
    analyze([parsed])
    stages = {"read_kineto": seconds, "analyses": time.perf_counter() - t0}
    return {
        "seconds": seconds,  # the row is the reader's: its time and its peak
        "cpu_s": cpu_s,
        "stages": stages,
        "import_s": import_s,
        "rss_import_kb": rss_import_kb,
        "peak_kb": peak_read_kb,
        "hwm_kb": hwm_read_kb,
        "peak_after_analyses_kb": peak_kb(),
        "result": {"rows": len(parsed.events.start)},
    }


def child_sections(trace: Path) -> dict[str, Any]:
    """In a stepscope child: the read, then every analysis of compute_facts, advice and the report, timed apart."""
    t0 = time.perf_counter()
    from stepscope.advice import advise  # noqa: F401  (loaded before timing, as the pipeline would)
    from stepscope.analysis import facts
    from stepscope.pipeline import analyze
    from stepscope.trace.load import read_trace

    import_s = time.perf_counter() - t0
    spent: Counter[str] = Counter()

    def timed(name: str, fn: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - started
        return run

    for name, fn in list(vars(facts).items()):  # every analysis compute_facts calls, by its name there
        module = getattr(fn, "__module__", "") or ""
        if callable(fn) and not isinstance(fn, type) and module.startswith("stepscope.analysis."):
            setattr(facts, name, timed(name, fn))
    started = time.perf_counter()
    trace = read_trace(trace)
    spent["read"] = time.perf_counter() - started
    started = time.perf_counter()
    analyze(trace)
    total = time.perf_counter() - started
    spent["advice and report"] = total - sum(v for k, v in spent.items() if k != "read")
    return {"import_s": import_s, "sections": dict(spent), "analyses_s": total}


def import_costs(python: Path, src: Path, top: int = 8) -> list[tuple[str, float]]:
    """`python -X importtime` of what an analysis loads: self time summed per package (stepscope per sub-package),
    the largest first."""
    code = "import stepscope.pipeline, stepscope.report.terminal"
    done = subprocess.run([str(python), "-X", "importtime", "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(src), "PATH": ""})
    per: Counter[str] = Counter()
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s+(\S.*)$", line)
        if m:
            name = m.group(2).strip().split(".")
            per[".".join(name[:2]) if name[0] == "stepscope" else name[0]] += int(m.group(1)) / 1e6
    return per.most_common(top)


def print_sections(label: str, result: dict[str, Any]) -> None:
    sections = sorted(result["sections"].items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{k} {v:.3f}" for k, v in sections if v >= 0.005)
    print(f"{label}: seconds by section (one process): {shown}")


def print_big(big: dict[str, Any], hta: dict[str, Any] | None, json_bytes: int) -> dict[str, float]:
    ratio = big["peak_bytes"] / json_bytes
    print(f"generated trace ({json_bytes / 1e9:.2f} GB of JSON, {big['events']:,} events): stepscope peak "
          f"{big['peak_bytes'] / 2**20:.0f} MB = {ratio:.2f}x the JSON (target <= {BIG_MEMORY_TARGET:g}x), "
          f"{big['seconds']:.1f} s")
    out = {"big_memory_ratio": ratio, "big_seconds": big["seconds"]}
    if hta is not None:
        speed = hta["seconds"] / big["seconds"]
        print(f"generated trace: HTA {hta['seconds']:.1f} s, {hta['peak_bytes'] / 2**20:.0f} MB; "
              f"HTA / stepscope wall {speed:.1f}x (target >= {BIG_SPEED_TARGET:g}x)")
        out["big_speed_ratio"] = speed
    return out


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one fresh process, its output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stderr[-3000:]!r}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def whole_process(stepscope_python: Path, hta_python: Path | None, trace: Path, src: Path,
                  runs: int) -> dict[str, object]:
    """What a user waits for: a fresh `python -m stepscope analyze TRACE` (its terminal report, imports and all),
    against a fresh Python doing HTA's import, load and both breakdowns. Runs alternate, so load from elsewhere
    falls on both; the medians are reported."""
    hta_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # compiled once, as installed
    env = {**hta_env, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))}
    ours = [str(stepscope_python), "-m", "stepscope", "analyze", str(trace)]
    measured: dict[str, list[tuple[float, float]]] = {"stepscope": [], "hta": []}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-hta-") as tmp:
        (Path(tmp) / trace.name).symlink_to(trace)
        theirs = [str(hta_python), "-c", HTA_SCRIPT, tmp] if hta_python is not None else None
        for i in range(-1, runs):  # the first round untimed: bytecode written, files in the page cache
            print(f"whole process {i + 1}/{runs} ...", file=sys.stderr, flush=True)
            this_round = {"stepscope": _timed(ours, env), "hta": _timed(theirs, hta_env) if theirs else None}
            for tool, times in this_round.items():
                if i >= 0 and times is not None:
                    measured[tool].append(times)
    out: dict[str, object] = {"runs": runs, "cpus": os.cpu_count(), "load_average": [load_before, os.getloadavg()[0]]}
    for tool, got in measured.items():
        if got:
            out[tool] = {"wall_s": [w for w, _ in got], "cpu_s": [c for _, c in got],
                         "median_wall_s": statistics.median(w for w, _ in got),
                         "median_cpu_s": statistics.median(c for _, c in got)}
    return out


def print_whole(whole: dict[str, object] | None) -> int:
    if whole is None:  # --whole-runs 0
        return 0
    ours, hta = whole["stepscope"], whole.get("hta")
    assert isinstance(ours, dict)
    load = whole["load_average"]
    assert isinstance(load, list)
    line = (f"whole process ({whole['cpus']} CPUs, 1-min load average {load[0]:.2f} before, {load[1]:.2f} after), "
            f"median of {whole['runs']} alternating runs: `stepscope analyze` "
            f"{ours['median_wall_s']:.3f} s (CPU {ours['median_cpu_s']:.3f} s)")
    if isinstance(hta, dict):
        line += (f", HTA {hta['median_wall_s']:.3f} s (CPU {hta['median_cpu_s']:.3f} s): "
                 f"{hta['median_wall_s'] / ours['median_wall_s']:.1f}x (target >= {WHOLE_SPEED_TARGET:g}x) "
                 f"[by CPU time: {hta['median_cpu_s'] / ours['median_cpu_s']:.1f}x]")
    print(line)
    return 0
