"""Many ranks: `stepscope analyze` on 1,024 generated rank traces with the local process pool and a Dask
LocalCluster (wall time, speed-up over one worker, the driver's peak memory), beside HTA 0.5.0 on the largest
folder it handles here.

    .venv/bin/python benchmarks/bench_ranks.py                    # about 10 minutes on 2 cores with HTA
    .venv/bin/python benchmarks/bench_ranks.py --no-hta --ranks 256

The rank folders are made by tests/rank_generator.py from a real gloo DDP rank (tests/data/gloo_ddp), with a
planted straggler: "full" ranks keep every event of the real rank, "small" ones only the ranges that matter. Each
measurement is a fresh child process (this parent only orchestrates), so the peak memory is that driver's own;
the workers are other processes and are not counted in it. HTA runs under its own throwaway venv
(benchmarks/.venv-hta/, as bench_analyze.py makes it). See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASE = ROOT / "tests" / "data" / "gloo_ddp" / "dataloader_straggler" / "rank0.json.gz"
GENERATOR = ROOT / "tests" / "rank_generator.py"
STRAGGLER = 777
DRIVER_MEMORY_TARGET_MB = 300
HTA_TIMEOUT_S = 900
MB = 1024 * 1024


# ---------------------------------------------------------------------------------------------- children


def _peak_kb(children: bool = False) -> int:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) if children else own


def _rss_kb(field: str = "VmRSS") -> int | None:
    try:
        with open("/proc/self/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith(field + ":")), None)
    except OSError:
        return None


class TreeMemory:
    """Samples the summed RSS of this process and all its descendants (workers, forked parsers) every 50 ms."""

    def __init__(self) -> None:
        import threading

        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _tree(pid: int) -> list[int]:
        pids, todo = [], [pid]
        while todo:
            p = todo.pop()
            pids.append(p)
            try:
                for task in os.listdir(f"/proc/{p}/task"):
                    with open(f"/proc/{p}/task/{task}/children") as f:
                        todo += [int(c) for c in f.read().split()]
            except OSError:
                continue
        return pids

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            total = 0
            for pid in self._tree(os.getpid()):
                try:
                    with open(f"/proc/{pid}/statm") as f:
                        total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
                except OSError:
                    continue
            self.peak_kb = max(self.peak_kb, total)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak_kb


def _child_stepscope(folder: Path, engine_spec: str) -> dict[str, Any]:
    from stepscope.pipeline import analyze
    from stepscope.ranks.engines import DaskEngine, LocalPool
    from stepscope.ranks.inputs import rank_files

    rss_import = _rss_kb()
    files = rank_files([folder])
    kind, workers = engine_spec.split(":")
    tree = TreeMemory()
    t0 = time.perf_counter()
    engine = LocalPool(int(workers)) if kind == "pool" else DaskEngine("local", int(workers))
    started = time.perf_counter()
    with engine:
        report = analyze(files, engine=engine)
        done = time.perf_counter()
    cr = report.cross_rank
    st = cr.straggler if cr else None
    return {"seconds": done - started, "start_s": started - t0, "rss_import_kb": rss_import,
            "peak_kb": _peak_kb(), "hwm_kb": _rss_kb("VmHWM"), "tree_peak_kb": tree.stop(),
            "ranks": cr.ranks if cr else 1, "failures": len(cr.failures) if cr else 0,
            "straggler": st.rank if st else None, "cause": st.cause.category if st and st.cause else None}


def _spin(seconds: float) -> None:
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def _child_probe() -> dict[str, Any]:
    """What two processes can get here now: the same CPU-bound tasks (40 x 50 ms) on one and on two workers. On a
    machine shared with other work this ceiling can be far below 2."""
    from stepscope.ranks.engines import LocalPool

    walls = {}
    for n in (1, 2):
        with LocalPool(n) as engine:
            t0 = time.perf_counter()
            list(engine.map(_spin, [0.05] * 40))
            walls[n] = time.perf_counter() - t0
    return {"one_s": walls[1], "two_s": walls[2], "ratio": walls[1] / walls[2]}


def _child_hta(folder: Path) -> dict[str, Any]:
    from hta.trace_analysis import TraceAnalysis

    rss_import = _rss_kb()
    tree = TreeMemory()
    t0 = time.perf_counter()
    analyzer = TraceAnalysis(trace_dir=str(folder))
    load_s = time.perf_counter() - t0
    failed = []
    for name in ("get_temporal_breakdown", "get_comm_comp_overlap"):
        try:
            getattr(analyzer, name)(visualize=False)
        except Exception as exc:  # HTA's analyses need GPU kernels; these ranks are CPU-only (gloo)
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    return {"seconds": time.perf_counter() - t0, "load_s": load_s, "rss_import_kb": rss_import,
            "peak_kb": _peak_kb(), "children_peak_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
            "tree_peak_kb": tree.stop(), "ranks": len(analyzer.t.traces), "failed": failed}


# ------------------------------------------------------------------------------------------------ parent


def run_child(python: Path, args: list[str], timeout: float | None = None) -> dict[str, Any]:
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    try:
        done = subprocess.run([str(python), str(Path(__file__).resolve()), "--child", *args], capture_output=True,
                              text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout:.0f} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:] or ['?']}"}
    return json.loads(lines[-1])


def make_folder(out: Path, ranks: int, small: bool) -> float:
    """Generate a rank folder (in a child: the parent stays small); its total size in MB of JSON, unzipped."""
    cmd = [sys.executable, str(GENERATOR), str(BASE), str(out), "--ranks", str(ranks), "--straggler",
           str(STRAGGLER % ranks), *(["--small"] if small else [])]
    subprocess.run(cmd, check=True, capture_output=True)
    count = ("import gzip, sys, pathlib; print(sum(len(gzip.decompress(p.read_bytes()))"
             " for p in pathlib.Path(sys.argv[1]).glob('*.json.gz')))")
    size = subprocess.run([sys.executable, "-c", count, str(out)], check=True, capture_output=True, text=True)
    return int(size.stdout) / MB


def subset(folder: Path, n: int, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for p in sorted(folder.glob("*.json.gz"))[:n]:
        (out / p.name).symlink_to(p)
    return out


def hta_sizes(largest: int) -> list[int]:
    sizes, n = [], 8
    while n < largest:
        sizes.append(n)
        n *= 4
    return [*sizes, largest]


def main() -> None:
    parser = argparse.ArgumentParser(description="stepscope on many ranks, beside HTA 0.5.0")
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--no-hta", action="store_true")
    parser.add_argument("--no-dask", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        result = (_child_probe() if kind == "probe" else _child_hta(Path(rest[0])) if kind == "hta"
                  else _child_stepscope(Path(rest[0]), rest[1]))
        print(json.dumps(result))
        return
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} (1 min) before")
    results: dict[str, Any] = {"ranks": args.ranks, "cpus": os.cpu_count(), "rows": []}
    results["probe"] = probe = run_child(Path(sys.executable), ["probe"])
    if "ratio" in probe:
        print(f"CPU available now: plain CPU-bound tasks run {probe['ratio']:.2f}x faster on 2 workers than on 1 "
              f"({probe['one_s']:.2f} s -> {probe['two_s']:.2f} s): the ceiling for the speed-ups below")
    with tempfile.TemporaryDirectory(prefix="bench-ranks-") as tmp:
        folders = {}
        for label, small in (("full", False), ("small", True)):
            folders[label] = Path(tmp) / label
            size = make_folder(folders[label], args.ranks, small)
            results[f"{label}_json_mb"] = size
            print(f"{label}: {args.ranks} ranks, {size:,.1f} MB of JSON in all")
        engines = ["pool:1", "pool:2"] + ([] if args.no_dask else ["dask:1", "dask:2"])
        for label in ("full", "small"):
            for spec in engines if label == "full" else ["pool:2"]:
                probe = run_child(Path(sys.executable), ["probe"])  # the CPU this session gets, just before
                row = {"folder": label, "engine": spec, "probe": probe.get("ratio"),
                       **run_child(Path(sys.executable), ["ss", str(folders[label]), spec])}
                results["rows"].append(row)
                print_row(row)
        print_ratios(results["rows"])
        if not args.no_hta:
            results["hta"] = hta_side(folders["full"], args.ranks, Path(tmp))
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) after")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def print_row(row: dict[str, Any]) -> None:
    if "error" in row:
        print(f"  {row['folder']:5} {row['engine']:7} failed: {row['error']}")
        return
    print(f"  {row['folder']:5} {row['engine']:7} {row['seconds']:7.2f} s  (engine start {row['start_s']:.2f} s)  "
          f"driver peak {row['peak_kb'] / 1024:6.1f} MB (after imports {row['rss_import_kb'] / 1024:.1f} MB), "
          f"all processes {row['tree_peak_kb'] / 1024:6.1f} MB  straggler {row['straggler']} ({row['cause']}), "
          f"{row['failures']} failures; probe {row['probe']:.2f}x")


def print_ratios(rows: list[dict[str, Any]]) -> None:
    by = {(r["folder"], r["engine"]): r for r in rows if "error" not in r}
    for kind, name in (("pool", "local pool"), ("dask", "Dask LocalCluster")):
        one, two = by.get(("full", f"{kind}:1")), by.get(("full", f"{kind}:2"))
        if one and two:
            print(f"speed-up, {name}, 2 workers over 1: {one['seconds'] / two['seconds']:.2f}x "
                  f"({one['seconds']:.2f} s -> {two['seconds']:.2f} s)")
    peaks = [r["peak_kb"] / 1024 for r in by.values()]
    print(f"driver peak: {max(peaks):.1f} MB at most (target under {DRIVER_MEMORY_TARGET_MB} MB)")


def hta_side(full: Path, largest: int, tmp: Path) -> list[dict[str, Any]]:
    sys.path.insert(0, str(HERE))
    from bench_analyze import hta_python

    python = hta_python(install=True)
    if python is None:
        print("HTA 0.5.0 could not be installed: no comparison")
        return []
    rows = []
    for n in hta_sizes(largest):
        folder = subset(full, n, tmp / f"hta-{n}")
        hta = {"ranks": n, "tool": "HTA 0.5.0", **run_child(python, ["hta", str(folder)], timeout=HTA_TIMEOUT_S)}
        ours = {"ranks": n, "tool": "stepscope", **run_child(Path(sys.executable), ["ss", str(folder), "pool:2"])}
        rows += [hta, ours]
        for r in (hta, ours):
            text = r.get("error") or (f"{r['seconds']:7.2f} s, peak {r['peak_kb'] / 1024:7.1f} MB in the main "
                                      f"process, {r['tree_peak_kb'] / 1024:7.1f} MB all processes")
            print(f"  {n:5} ranks  {r['tool']:10} {text}")
        if hta.get("failed"):
            print("    HTA analyses that failed: " + "; ".join(f[:120] for f in hta["failed"]))
        if "error" in hta:
            break
    return rows


if __name__ == "__main__":
    main()
