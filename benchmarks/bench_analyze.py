"""Speed and memory of `stepscope analyze` against Holistic Trace Analysis (HTA) 0.5.0.

Run it with the project's venv:  .venv/bin/python benchmarks/bench_analyze.py  (see benchmarks/README.md)

Each measurement runs in a fresh child process (the parent only orchestrates), so peak memory is that
child's own. Inside the child: imports first, then the RSS right after imports, then the work timed with
time.perf_counter, then the peak RSS from getrusage. HTA runs under its own throwaway venv
(benchmarks/.venv-hta/, created on first use), stepscope under the interpreter running this script.

Only the standard library is imported at module level: the same file is the child under both venvs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_parts as parts
import bench_phases

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TRACES = (ROOT / ".." / "shared" / "traces" / "kineto").resolve()
MAIN_TRACE = TRACES / "v100_ddp_train_rank1.json.gz"
STRESS_TRACE = TRACES / "mtia_train_stress_456k_events.json.gz"
HTA_VENV = HERE / ".venv-hta"
HTA_REQUIREMENT = "HolisticTraceAnalysis==0.5.0"

SPEED_TARGET = 5.0  # HTA seconds / stepscope seconds, at least
MEMORY_TARGET = 0.4  # stepscope peak / HTA peak, at most
STRESS_SECONDS_TARGET = 2.0  # stepscope on the 456k-event trace, under

MB = 1024 * 1024


# ---------------------------------------------------------------------------------------------- child


def _status_kb(field: str) -> int | None:
    """A KiB figure from /proc/self/status (Linux): VmRSS = resident now, VmHWM = this image's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _rss_now_kb() -> int:
    now = _status_kb("VmRSS")
    return now if now is not None else _peak_kb()


def _peak_kb() -> int:
    """Peak RSS of this process and of any child it waited for (HTA forks parsers for several ranks).

    Linux carries ru_maxrss across exec: a child starts with its parent's peak (vfork) or RSS (fork)
    as a floor. The parent keeps itself small (it counts events in a child too) so that floor stays
    below every child's post-import RSS; VmHWM, which exec resets, is recorded as a cross-check.
    """
    scale = 1024 if sys.platform == "darwin" else 1  # macOS reports bytes, Linux KiB
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // scale
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // scale
    return max(own, children)


def _child_hta(trace: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis

    import_s = time.perf_counter() - t0
    rss_import_kb = _rss_now_kb()
    with tempfile.TemporaryDirectory(prefix="bench-hta-") as tmp:
        # TraceAnalysis wants a folder of trace files: give it one holding just this trace.
        link = Path(tmp) / trace.name
        try:
            link.symlink_to(trace)
        except OSError:
            link.write_bytes(trace.read_bytes())
        t0, c0 = time.perf_counter(), time.process_time()
        analyzer = TraceAnalysis(trace_dir=tmp)
        t1 = time.perf_counter()
        temporal = analyzer.get_temporal_breakdown(visualize=False)
        t2 = time.perf_counter()
        # HTA defaults to ranks=[0] and raises a bare ValueError for a rank-1 trace: name the ranks loaded.
        idle, _ = analyzer.get_idle_time_breakdown(ranks=sorted(analyzer.t.traces), visualize=False)
        t3, c3 = time.perf_counter(), time.process_time()
    row = temporal.iloc[0]
    return {
        "seconds": t3 - t0,
        "cpu_s": c3 - c0,
        "stages": {"load": t1 - t0, "temporal_breakdown": t2 - t1, "idle_time_breakdown": t3 - t2},
        "import_s": import_s,
        "rss_import_kb": rss_import_kb,
        "peak_kb": _peak_kb(),
        "hwm_kb": _status_kb("VmHWM"),
        "result": {
            "idle_pct": float(row["idle_time_pctg"]),
            "compute_pct": float(row["compute_time_pctg"]),
            "non_compute_pct": float(row["non_compute_time_pctg"]),
            "idle_rows": len(idle),
        },
    }


def _child_stepscope(trace: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    import stepscope
    import stepscope.pipeline  # what `stepscope.analyze` loads on first use: imported untimed, like HTA's

    import_s = time.perf_counter() - t0
    rss_import_kb = _rss_now_kb()
    t0, c0 = time.perf_counter(), time.process_time()
    report = stepscope.analyze([trace])
    seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    summary = report.summary
    return {
        "seconds": seconds,
        "cpu_s": cpu_s,
        "import_s": import_s,
        "rss_import_kb": rss_import_kb,
        "peak_kb": _peak_kb(),
        "hwm_kb": _status_kb("VmHWM"),
        "result": {
            "step_count": summary.step_count,
            "step_time_us": summary.step_time_us,
            "gpu_utilization": summary.gpu_utilization,
            "patterns": [p.id for p in report.patterns],
        },
    }


# --------------------------------------------------------------------------------------------- parent


def hta_python(install: bool) -> Path | None:
    """The HTA venv's interpreter, creating the venv and installing HTA 0.5.0 into it when missing."""
    python = HTA_VENV / "bin" / "python"
    probe = [str(python), "-c", "import importlib.metadata as m; print(m.version('HolisticTraceAnalysis'))"]
    if python.exists():
        done = subprocess.run(probe, capture_output=True, text=True)
        if done.returncode == 0 and done.stdout.strip() == HTA_REQUIREMENT.split("==")[1]:
            return python
    if not install:
        return None
    print(f"installing {HTA_REQUIREMENT} into {HTA_VENV} (once; takes a minute or two) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(HTA_VENV)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", HTA_REQUIREMENT]
    done = subprocess.run(pip, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"pip install {HTA_REQUIREMENT} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
        return None
    return python


def run_child(python: Path, tool: str, trace: Path) -> dict[str, Any]:
    cmd = [str(python), str(Path(__file__).resolve()), "--child", tool, str(trace)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # Bytecode as an installed package has it: with PYTHONDONTWRITEBYTECODE set (some shells set it), every
    # child would compile stepscope's modules from source inside the timed window.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if tool.startswith("stepscope"):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{tool} on {trace.name} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(lines[-1])


def summarize(runs: list[dict[str, Any]], tool: str, trace: Path, events: int) -> dict[str, Any]:
    """Best time and median peak memory over the fresh child processes of one measurement."""
    best = min(runs, key=lambda r: r["seconds"])
    peak = int(statistics.median(r["peak_kb"] for r in runs)) * 1024
    base = int(statistics.median(r["rss_import_kb"] for r in runs)) * 1024
    hwm = [r["hwm_kb"] for r in runs if r.get("hwm_kb") is not None]
    return {
        "trace": trace.name,
        "tool": tool,
        "events": events,
        "seconds": best["seconds"],
        "seconds_all": [r["seconds"] for r in runs],
        "cpu_seconds": min(r["cpu_s"] for r in runs),
        "stages": best.get("stages"),
        "import_s": best["import_s"],
        "rss_after_import_bytes": base,
        "peak_bytes": peak,
        "peak_above_import_bytes": peak - base,
        "peak_vmhwm_bytes": int(statistics.median(hwm)) * 1024 if hwm else None,
        "bytes_per_event": peak / events,
        "bytes_per_event_above_import": (peak - base) / events,
        "result": best["result"],
    }


LABELS = {"hta": "HTA 0.5.0", "stepscope": "stepscope", "stepscope-read": "  read_kineto only"}


def print_table(rows: list[dict[str, Any]]) -> None:
    head = ("trace", "tool", "events", "seconds", "cpu s", "peak MB", "import MB", "above MB", "B/event", "B/ev above")
    cells = [
        (
            r["trace"].removesuffix(".json.gz"),
            LABELS.get(r["tool"], r["tool"]),
            f"{r['events']:,}",
            f"{r['seconds']:.3f}",
            f"{r['cpu_seconds']:.3f}",
            f"{r['peak_bytes'] / MB:.1f}",
            f"{r['rss_after_import_bytes'] / MB:.1f}",
            f"{r['peak_above_import_bytes'] / MB:.1f}",
            f"{r['bytes_per_event']:.0f}",
            f"{r['bytes_per_event_above_import']:.0f}",
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    for line in (head, tuple("-" * w for w in widths), *cells):
        # text columns left-aligned, numbers right-aligned
        pairs = enumerate(zip(line, widths, strict=True))
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in pairs))


CHILDREN = {"hta": _child_hta, "stepscope": _child_stepscope, "stepscope-read": parts.child_read,
            "count": parts.child_count, "stepscope-sections": parts.child_sections}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="fresh child processes per measurement")
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    parser.add_argument("--trace", type=Path, default=MAIN_TRACE, help="trace compared with HTA")
    parser.add_argument("--stress-trace", type=Path, default=STRESS_TRACE, help="the 456k-event trace")
    parser.add_argument("--no-hta", action="store_true", help="skip HTA (stepscope figures only)")
    parser.add_argument("--no-install", action="store_true", help="do not create the HTA venv if missing")
    parser.add_argument("--big-gb", type=float, default=1.0, help="the generated trace's JSON size (0: none)")
    parser.add_argument("--big-repeat", type=int, default=1, help="fresh child processes on the generated trace")
    parser.add_argument("--whole-runs", type=int, default=5, help="alternating fresh `stepscope analyze` and HTA "
                        "processes, timed whole (0: none)")
    parser.add_argument("--whole-only", action="store_true", help="only the whole-process comparison")
    parser.add_argument("--phase-runs", type=int, default=3, help="fresh CLI processes timed by phase (0: none)")
    parser.add_argument("--child", nargs=2, metavar=("TOOL", "TRACE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:  # inside a measured child process: one JSON line on stdout
        print(json.dumps(CHILDREN[args.child[0]](Path(args.child[1]).resolve())))
        return 0

    main_trace, stress_trace = args.trace.resolve(), args.stress_trace.resolve()
    hta = None if args.no_hta else hta_python(install=not args.no_install)
    if hta is None and not args.no_hta:
        print("HTA unavailable: stepscope figures only", file=sys.stderr)
    here = Path(sys.executable)
    load_before = os.getloadavg()[0]
    whole = parts.whole_process(here, hta, main_trace, ROOT / "src", args.whole_runs) if args.whole_runs else None
    split = (bench_phases.phases(str(here), str(main_trace), str(ROOT / "src"), args.phase_runs)
             if args.phase_runs else None)
    if args.whole_only:
        parts.print_whole(whole)
        bench_phases.print_phases(split, args.phase_runs)
        return 0
    events = {t: run_child(here, "count", t)["events"] for t in (main_trace, stress_trace)}

    plan = [(here, "stepscope", main_trace), (here, "stepscope-read", main_trace),
            (here, "stepscope", stress_trace), (here, "stepscope-read", stress_trace)]
    if hta is not None:
        plan[0:0] = [(hta, "hta", main_trace)]
        plan[3:3] = [(hta, "hta", stress_trace)]
    # Round robin, so a burst of load on the machine does not land on one measurement only.
    runs: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(plan))}
    for rep in range(args.repeat):
        print(f"round {rep + 1}/{args.repeat} ...", file=sys.stderr, flush=True)
        for i, (python, tool, trace) in enumerate(plan):
            runs[i].append(run_child(python, tool, trace))
    rows = [summarize(runs[i], tool, trace, events[trace]) for i, (_, tool, trace) in enumerate(plan)]
    sections = run_child(here, "stepscope-sections", main_trace)
    big_rows: dict[str, dict[str, Any]] = {}
    if args.big_gb > 0:
        big, json_bytes, big_events = parts.big_trace(args.big_gb)
        for python, tool in ([(hta, "hta")] if hta is not None else []) + [(here, "stepscope")]:
            print(f"{tool} on {big.name} ...", file=sys.stderr, flush=True)
            measured = [run_child(python, tool, big) for _ in range(args.big_repeat)]
            big_rows[tool] = summarize(measured, tool, big, big_events)
        rows += list(big_rows.values())
    load_after = os.getloadavg()[0]
    print()
    # The benchmark itself keeps about one core busy; more than that means someone else was running too.
    busy = "  (other work was running: timings are pessimistic)" if max(load_before, load_after) > 1.3 else ""
    print(f"{os.cpu_count()} CPUs; 1-min load average {load_before:.2f} before, {load_after:.2f} after{busy}")
    print_table(rows)
    print()
    for r in rows:  # ru_maxrss against this image's own VmHWM: they differ if the parent's peak leaked in
        if r["peak_vmhwm_bytes"] is not None and r["peak_bytes"] - r["peak_vmhwm_bytes"] > 2 * MB:
            print(f"warning: {r['tool']} on {r['trace']}: ru_maxrss {r['peak_bytes'] / MB:.1f} MB but VmHWM "
                  f"{r['peak_vmhwm_bytes'] / MB:.1f} MB")

    by = {(r["tool"], r["trace"]): r for r in rows}
    short = {main_trace: main_trace.name.split("_")[0], stress_trace: stress_trace.name.split("_")[0]}
    summary: dict[str, Any] = {}
    for trace in (main_trace, stress_trace):
        ours, read, theirs = (by.get((t, trace.name)) for t in ("stepscope", "stepscope-read", "hta"))
        assert ours is not None and read is not None
        print(f"{short[trace]}: stepscope stages (one process): read_kineto {read['seconds']:.3f} s, "
              f"analyses {read['stages']['analyses']:.3f} s; "
              f"read_kineto's peak {read['peak_bytes'] / MB:.1f} MB of {ours['peak_bytes'] / MB:.1f} MB")
        if theirs is None:
            continue
        st, res = theirs["stages"], theirs["result"]
        print(f"{short[trace]}: HTA stages: load {st['load']:.3f} s, "
              f"temporal {st['temporal_breakdown']:.3f} s, idle {st['idle_time_breakdown']:.3f} s; "
              f"HTA says idle {res['idle_pct']}%, compute {res['compute_pct']}%, "
              f"non-compute {res['non_compute_pct']}%")
        summary[short[trace]] = {
            "speed_ratio": theirs["seconds"] / ours["seconds"],
            "speed_ratio_cpu": theirs["cpu_seconds"] / ours["cpu_seconds"],
            "speed_ratio_with_imports": (theirs["seconds"] + theirs["import_s"]) / (ours["seconds"] + ours["import_s"]),
            "memory_ratio": ours["peak_bytes"] / theirs["peak_bytes"],
            "memory_ratio_above_import": ours["peak_above_import_bytes"] / theirs["peak_above_import_bytes"],
        }
    for tool in ("stepscope", "hta"):
        big, small = by.get((tool, stress_trace.name)), by.get((tool, main_trace.name))
        if big is not None and small is not None:
            summary[f"{tool}_bytes_per_event_ratio"] = big["bytes_per_event"] / small["bytes_per_event"]
            summary[f"{tool}_bytes_per_event_above_import_ratio"] = (
                big["bytes_per_event_above_import"] / small["bytes_per_event_above_import"])
    stress_s = by[("stepscope", stress_trace.name)]["seconds"]
    summary["stress_seconds"] = stress_s

    print()
    head = summary.get(short[main_trace])
    if head is not None:
        print(f"speed ratio (HTA / stepscope): {head['speed_ratio']:.1f}x  (target >= {SPEED_TARGET:g}x)  "
              f"[wall clock; by CPU time: {head['speed_ratio_cpu']:.1f}x; "
              f"imports included: {head['speed_ratio_with_imports']:.1f}x]")
        print(f"memory ratio (stepscope / HTA): {head['memory_ratio']:.2f}  (target <= {MEMORY_TARGET:g})  "
              f"[total peak RSS; above post-import RSS: {head['memory_ratio_above_import']:.2f}]")
    else:
        print("speed ratio (HTA / stepscope): n/a (HTA not run)")
        print("memory ratio (stepscope / HTA): n/a (HTA not run)")
    parts.print_whole(whole)
    bench_phases.print_phases(split, args.phase_runs)
    stress_cpu = by[("stepscope", stress_trace.name)]["cpu_seconds"]
    print(f"mtia analyse: {stress_s:.2f} s (target < {STRESS_SECONDS_TARGET:g} s)  [CPU time {stress_cpu:.2f} s]")
    for tool in ("stepscope", "hta"):
        if f"{tool}_bytes_per_event_ratio" in summary:
            print(f"peak bytes/event, {short[stress_trace]} / {short[main_trace]} ({LABELS[tool]}): "
                  f"{summary[f'{tool}_bytes_per_event_ratio']:.2f} total, "
                  f"{summary[f'{tool}_bytes_per_event_above_import_ratio']:.2f} above post-import RSS "
                  f"(1.0 = linear)")

    parts.print_sections(short[main_trace], sections)
    costs = parts.import_costs(here, ROOT / "src")
    print(f"imports an analysis loads (self time, s): {', '.join(f'{n} {t:.3f}' for n, t in costs)}")
    if big_rows:
        summary.update(parts.print_big(big_rows["stepscope"], big_rows.get("hta"), json_bytes))
    summary["sections"], summary["whole_process"], summary["phases"] = sections, whole, split

    if args.json:
        out = {
            "machine": {"cpus": os.cpu_count(), "platform": sys.platform, "python": sys.version.split()[0],
                        "load_average_before": load_before, "load_average_after": load_after},
            "repeat": args.repeat,
            "method": "fresh child process per run; seconds = best run, perf_counter around the work "
                      "(imports excluded); peak = median over runs of getrusage ru_maxrss; "
                      "memory_ratio uses total peak RSS; cpu_seconds = best process_time over the work",
            "rows": rows,
            "summary": summary,
        }
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
