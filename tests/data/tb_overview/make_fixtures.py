"""Regenerate the PyTorch profiler TensorBoard plugin's Overview numbers for the shared traces.

    python tests/data/tb_overview/make_fixtures.py

Installs torch-tb-profiler 0.4.3 (the last release; the plugin is deprecated) into a throwaway virtual
environment, feeds it each shared trace, and writes its per-step breakdown (µs) as <trace>.json here.
The plugin predates two Kineto changes, so each trace is normalised before it reads it:
- runtime calls are written under the category `cuda_runtime`/`cuda_driver`; the plugin knows only
  `Runtime` and would report no runtime at all, so they are renamed `Runtime`;
- it drops user annotations (other than ProfilerStep and nccl/gloo ops) from CPU exec, while
  stepscope counts them (DESIGN.md: cpu_exec includes user annotations), so they are renamed `cpu_op`.
A third difference is left in and handled by the test: the plugin counts a collective kernel as
communication only through its launching `nccl:*` op, so NCCL kernels launched outside any op (all of
them in v100_ddp_train_rank1) land in its `kernel`; stepscope also recognises them by name.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
TRACES = Path(__file__).resolve().parents[4] / "shared" / "traces" / "kineto"
NAMES = ["a100_event_sync_tiny", "v100_resnet_ns_units", "a100_convnet_ddp_rank0", "v100_ddp_train_rank1",
         "a100_recsys_ddp_rank0", "mi250_rocm_toy_train", "a100_triton_kernel"]
ROLES = ["kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other", "total"]

RUN_PLUGIN = """
import json, sys
from torch_tb_profiler.profiler.data import RunProfileData
data = RunProfileData.parse("w", "1", sys.argv[1], sys.argv[2])
data.process()
roles = json.loads(sys.argv[3])
print(json.dumps([{"step": str(n), **{r: float(c.costs[i]) for i, r in enumerate(roles)}}
                  for n, c in zip(data.steps_names, data.steps_costs)]))
"""


def normalise(src: Path, dst: Path) -> None:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    for e in doc["traceEvents"]:
        cat, name = e.get("cat"), str(e.get("name", ""))
        if cat in ("cuda_runtime", "cuda_driver"):
            e["cat"] = "Runtime"
        elif cat == "user_annotation" and not name.startswith(("ProfilerStep#", "nccl:", "gloo:")):
            e["cat"] = "cpu_op"
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([venv / "bin/pip", "install", "-q", "torch-tb-profiler==0.4.3", "pandas"], check=True)
        for name in NAMES:
            trace = Path(tmp) / f"{name}.json.gz"
            normalise(TRACES / f"{name}.json.gz", trace)
            out = subprocess.run([venv / "bin/python", "-c", RUN_PLUGIN, str(trace), tmp, json.dumps(ROLES)],
                                 check=True, capture_output=True, text=True).stdout
            steps = json.loads(out.strip().splitlines()[-1])
            (HERE / f"{name}.json").write_text(json.dumps({"plugin": "torch-tb-profiler 0.4.3", "steps": steps},
                                                          indent=1) + "\n")
            print(f"{name}: {len(steps)} steps")


if __name__ == "__main__":
    main()
