"""Ground truth for the replay: one process runs an unmodified script and records, at its optimizer steps,
unprofiled windows (synchronised at both ends), then one profiled window per option set (warm-up 2, record 5,
exactly as stepscope records), then the profiler's cost per event for each option set (capture/calibrate).

    python tests/gpu/faithful_driver.py --out DIR [--optsets default,no_shapes,...] -- SCRIPT ARGS...

DIR gets plain.json (every window's ms per step, the profiled windows' host-clock steps, the calibrations)
and trace_<optset>.json.gz. Only an optimizer step post-hook is installed (one Python call per step).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import runpy
import shutil
import sys
import time
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.profiler import ProfilerActivity, profile


def _load_calibrate():  # by path: the stepscope package's imports need its dependencies, absent on the GPU host
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "src/stepscope/capture/calibrate.py"
    spec = importlib.util.spec_from_file_location("stepscope_calibrate", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.measure_profiler_cost


measure_profiler_cost = _load_calibrate()

OPTSETS = {  # name -> (record_shapes, profile_memory): stepscope's defaults and what its flags turn off
    "default": (True, True),
    "no_shapes": (False, True),
    "no_memory": (True, False),
    "minimal": (False, False),
}
WARMUP, ACTIVE = 2, 5


class Done(BaseException):
    pass


class Driver:
    def __init__(self, out: Path, warm: int, plain: int, windows: int, optsets: list[str]) -> None:
        self.out, self.warm, self.plain, self.windows = out, warm, plain, windows
        self.plan = ["warm"] * warm
        for _ in range(windows):
            self.plan += ["plain"] * plain + ["plain_end"]
        for name in optsets:
            self.plan += [f"prof:{name}"] * (WARMUP + ACTIVE) + [f"prof_end:{name}"]
        if optsets:
            self.plan += ["plain"] * plain + ["plain_end"]
        self.n = 0
        self.cuda = torch.cuda.is_available()
        self.results: dict = {"plain_ms": [], "profiled_host_ms": {}, "calibration": {}, "argv": sys.argv[1:]}
        self.t = None
        self.prof = None
        self.host_steps: list[float] = []

    def sync(self) -> int:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter_ns()

    def on_step(self, *_: object) -> None:
        kind = self.plan[self.n] if self.n < len(self.plan) else "done"
        prev = self.plan[self.n - 1] if self.n else "warm"
        self.n += 1
        if kind == "done":
            raise Done
        if kind == "plain" and (not prev.startswith("plain") or prev == "plain_end"):
            self.t = (self.sync(), 0)
        elif kind == "plain":
            self.t = (self.t[0], self.t[1] + 1)
        elif kind == "plain_end":
            start, steps = self.t
            self.results["plain_ms"].append((self.sync() - start) / 1e6 / (steps + 1))
        elif kind.startswith("prof:") and self.prof is None:
            self.start_profiler(kind[5:])
            self.t = time.perf_counter_ns()
        elif kind.startswith(("prof:", "prof_end:")):
            now = time.perf_counter_ns()
            self.host_steps.append((now - self.t) / 1e6)
            self.t = now
            self.prof.step()  # the last one completes the active phase: the trace is exported
            if kind.startswith("prof_end:"):
                self.prof.stop()
                self.prof = None
                self.results["profiled_host_ms"][kind[9:]] = self.host_steps[WARMUP:]
                self.host_steps = []
                self.t = None
        self.save()

    def start_profiler(self, name: str) -> None:
        shapes, memory = OPTSETS[name]
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        sched = torch.profiler.schedule(wait=0, warmup=WARMUP, active=ACTIVE, repeat=1)
        self.prof = profile(activities=acts, schedule=sched, record_shapes=shapes, profile_memory=memory,
                            on_trace_ready=lambda p: self.export(p, name))
        self.prof.start()

    def export(self, prof: object, name: str) -> None:
        raw = self.out / f"trace_{name}.json"
        prof.export_chrome_trace(str(raw))  # type: ignore[attr-defined]
        with open(raw, "rb") as src, gzip.open(str(raw) + ".gz", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()

    def calibrate(self) -> None:
        for name in self.results["profiled_host_ms"]:
            shapes, memory = OPTSETS[name]
            cost = measure_profiler_cost(record_shapes=shapes, profile_memory=memory, cuda=self.cuda)
            self.results["calibration"][name] = cost.to_dict()
        self.save()

    def save(self) -> None:
        (self.out / "plain.json").write_text(json.dumps(self.results, indent=1))


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--")
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--warm", type=int, default=10)
    p.add_argument("--plain", type=int, default=20)
    p.add_argument("--windows", type=int, default=2)
    p.add_argument("--optsets", default="default")
    args = p.parse_args(argv[:split])
    script, *script_args = argv[split + 1:]
    args.out.mkdir(parents=True, exist_ok=True)
    optsets = [o for o in args.optsets.split(",") if o and o != "none"]
    driver = Driver(args.out, args.warm, args.plain, args.windows, optsets)
    register_optimizer_step_post_hook(driver.on_step)
    sys.argv = [script, *script_args]
    t0 = time.time()
    try:
        runpy.run_path(script, run_name="__main__")
        driver.results["ended"] = "the script ended before the plan did"
    except Done:
        driver.results["ended"] = "plan complete"
    driver.results["seconds"] = time.time() - t0
    driver.results["device"] = torch.cuda.get_device_name(0) if driver.cuda else "cpu"
    driver.results["torch"] = torch.__version__
    driver.results["cpus"] = os.cpu_count()
    driver.calibrate()
    print(json.dumps({k: v for k, v in driver.results.items() if k != "calibration"}))
    os._exit(0)  # DataLoader workers and CUDA teardown can hang after a stopped script


if __name__ == "__main__":
    main()
