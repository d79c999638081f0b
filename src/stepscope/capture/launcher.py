"""Whether a launcher (torchrun, torch.distributed.run, accelerate, a SLURM script setting torch's variables) started
this process as one rank of several, and the job's name that all its ranks derive alike.

Read from the environment only: imports nothing, so capture can ask before the program runs.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class Launch:
    rank: int
    world_size: int
    local_rank: int
    job: str  # the same on every rank the launcher started (the job folder's name after the program's)


def launched(env: Mapping[str, str] | None = None) -> Launch | None:
    """This process's rank when a launcher started it as one of several ranks (WORLD_SIZE over 1 with a RANK or
    LOCAL_RANK), else None."""
    env = os.environ if env is None else env
    world = _int(env.get("WORLD_SIZE"))
    rank = _int(env.get("RANK"))
    local = _int(env.get("LOCAL_RANK"))
    if world is None or world < 2 or (rank is None and local is None):
        return None
    rank = rank if rank is not None else local
    assert rank is not None
    return Launch(rank, world, local if local is not None else rank, _job(env))


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def _job(env: Mapping[str, str]) -> str:
    """The job's name: the launcher's run id when the user gave one (`torchrun --rdzv-id`: the same on every node),
    else the time the launcher (the ranks' parent process) started, which every rank it started reads alike (torchrun
    on one node makes up a uuid as its run id: no name for a folder); a restart of the workers by an elastic agent
    gets a name of its own."""
    run_id = env.get("TORCHELASTIC_RUN_ID", "")
    restart = _int(env.get("TORCHELASTIC_RESTART_COUNT")) or 0
    if run_id and run_id != "none" and not _UUID.fullmatch(run_id):
        name = run_id
    else:
        started = _parent_started()
        name = time.strftime("%Y%m%d-%H%M%S", time.localtime(started)) if started else \
            f"port{env.get('MASTER_PORT', '0')}"
    return name + (f"-restart{restart}" if restart else "")


def _parent_started() -> float | None:
    """The wall-clock time the parent process started (Linux's /proc), None where it cannot be read."""
    try:
        with open(f"/proc/{os.getppid()}/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])  # field 22, starttime, counted after the name
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None
