"""`cpu_threads`: torch's intra-op threads raised to the cores the process may use, less the DataLoader's workers
(`torch.set_num_threads(N)`); typical where a launcher or the environment set OMP_NUM_THREADS=1, or the script
chose one thread. Tried only where the diagnosis sees the step compute on fewer threads than free cores.

In a trial the program's own `torch.set_num_threads(n)` calls with n < N are given N (their sites are recorded
for the patch); DataLoader workers, which set one thread each, are left alone.
"""

from __future__ import annotations

import os
from typing import Any

from stepscope.tune.edits import Patchwork, after_imports, argument_at, mark, named
from stepscope.tune.fix import Fix, Params, PlanContext
from stepscope.tune.points import Points
from stepscope.tune.points.failure import owned_by
from stepscope.tune.points.undo import user_site
from stepscope.tune.wire import CallSite, Settings

MAX_SITES = 16


def _params(ctx: PlanContext) -> Params:
    evidence = ctx.evidence("cpu_threads")
    cores = int(evidence.get("cpu_cores") or ctx.device.cpu_cores)
    workers = int(evidence.get("dataloader_workers") or 0)
    return {"threads": max(cores - workers, 1)}


def _install(points: Points, params: Params) -> None:
    import torch

    threads = int(params.get("threads", 1))
    original = torch.set_num_threads
    sites = points.settings.calls.setdefault("cpu_threads", [])
    pid = os.getpid()

    def set_num_threads(n: Any) -> None:
        if os.getpid() == pid:  # a DataLoader worker sets its one thread: left alone
            with owned_by("cpu_threads"):
                if len(sites) < MAX_SITES:
                    file, line = user_site(2)
                    sites.append(CallSite(file=file, line=line, value=n))
                if isinstance(n, int) and n < threads:
                    n = threads
                    points.applied["cpu_threads"] += 1
        original(n)

    points.patcher.replace(torch, "set_num_threads", set_num_threads)
    before = torch.get_num_threads()
    if before < threads:
        original(threads)
        points.patcher.on_undo(lambda: original(before))
        points.applied["cpu_threads"] += 1


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    threads = str(params.get("threads", 1))
    sites = settings.calls.get("cpu_threads", [])
    if sites:  # the program chose its threads: that choice is what changes
        return argument_at(work, sites, 0, threads, named("set_num_threads"))
    return after_imports(work, settings, f"torch.set_num_threads({threads}){mark('cpu_threads')}")


FIX = Fix(id="cpu_threads", code="torch.set_num_threads(N)  # N: the cores, less the DataLoader's workers",
          order=75, recommended_only=True, tolerance=0.01, install=_install, write=_write, params=_params)
