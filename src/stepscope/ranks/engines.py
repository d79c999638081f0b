"""Where the per-rank tasks run: in this process, a local process pool (the default), a Dask cluster or a Ray
cluster. One interface: `map(fn, items)` yields (index, result) as tasks finish; a task that could not run
(a worker died, the cluster went away) yields a TaskError instead of stopping the others."""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope.errors import StepscopeError

# Modules the pool's workers import once, before forking each worker (forkserver).
PRELOAD = ["stepscope.ranks.summarize", "stepscope.pipeline", "stepscope.pipeline.ranks"]


@dataclass(frozen=True)
class TaskError:
    """A task that did not return: the engine's reason, in one line."""

    error: str


def restore_environ(saved: dict[str, str] | None) -> None:
    """Put back the caller's environment. A Dask LocalCluster sets OMP_NUM_THREADS=1 (and MKL's, OpenBLAS's,
    PYTHONHASHSEED, ...) in this process, and Ray its own variables: every program started from here later
    would inherit them (a training run on one thread)."""
    if saved is None:
        return
    for key in [k for k in os.environ if k not in saved]:
        del os.environ[key]
    for key, value in saved.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


def default_workers() -> int:
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return max(os.cpu_count() or 1, 1)


class Engine:
    name = "engine"

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what this engine started (a pool, a local cluster); a cluster it joined is left running."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InProcess(Engine):
    """One task after another in this process (one worker): no start-up cost, one trace in memory at a time."""

    name = "this process"

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        for i, item in enumerate(items):
            yield i, fn(item)


class LocalPool(Engine):
    """A process pool over this machine's cores; workers fork from a server that imported stepscope once."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or default_workers()
        self.name = f"a local pool of {self.workers} processes"
        self._pool: ProcessPoolExecutor | None = None
        self._ran = False  # some task has returned: workers can start here

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
            context = multiprocessing.get_context(method)
            if method == "forkserver":
                context.set_forkserver_preload(PRELOAD)
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=context)
        return self._pool

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        pool = self._executor()
        futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
        for future in as_completed(futures):
            try:
                result = future.result()
            except BrokenProcessPool as exc:  # a worker killed (out of memory, a signal), or none could start
                if not self._ran:
                    self.close()
                    raise StepscopeError(
                        "the local process pool's workers died before finishing any task",
                        hint="a script that calls stepscope.analyze on several files needs an `if __name__ == "
                             "'__main__':` guard (each worker imports it), or pass engine=InProcess()") from None
                result = TaskError(f"the worker process died ({exc})")
            except Exception as exc:  # the task could not be sent or returned
                result = TaskError(f"the worker process failed ({type(exc).__name__}: {exc})")
            else:
                self._ran = True
            yield futures[future], result
        if getattr(pool, "_broken", False):
            self.close()  # the next map starts a fresh pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=not getattr(self._pool, "_broken", False), cancel_futures=True)
            self._pool = None


class DaskEngine(Engine):
    """A dask.distributed cluster: `local` starts a LocalCluster here; otherwise a scheduler address
    (tcp://host:8786) or a scheduler file (JSON, as `dask scheduler --scheduler-file` writes)."""

    def __init__(self, address: str, workers: int | None = None) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise StepscopeError("--dask needs dask.distributed, which is not installed",
                                 hint="pip install 'stepscope[dask]'") from None
        self._environ: dict[str, str] | None = dict(os.environ)
        self._cluster = None
        try:
            if address == "local":
                n = workers or default_workers()
                self._cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                             dashboard_address=None, silence_logs=logging.ERROR)
                self._client = Client(self._cluster)
                self.name = f"a Dask LocalCluster of {n} workers"
            elif Path(address).is_file():
                self._client = Client(scheduler_file=address, timeout="30s")
                self.name = f"the Dask cluster of {address}"
            else:
                self._client = Client(address, timeout="30s")
                self.name = f"the Dask cluster at {address}"
        except (OSError, TimeoutError, ValueError) as exc:
            self.close()
            raise StepscopeError(f"--dask {address}: cannot reach the cluster ({exc})") from None

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        from distributed import as_completed as dask_completed

        futures = self._client.map(fn, list(items), pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        for future in dask_completed(futures):
            i = index[future.key]
            try:
                result = future.result()
            except Exception as exc:  # KilledWorker, a lost connection, ...
                result = TaskError(f"the Dask task failed ({type(exc).__name__}: {exc})")
            future.release()  # the summary now lives here; let the cluster forget it
            yield i, result

    def close(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        restore_environ(self._environ)
        self._environ = None


def _apply(fn: Callable[[Any], Any], item: Any) -> Any:
    return fn(item)


class RayEngine(Engine):
    """A Ray cluster: no address starts a local Ray here (or joins the one RAY_ADDRESS names); otherwise
    `ray://host:10001` or `host:6379`."""

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        environ = dict(os.environ)  # importing ray sets RAY_CLIENT_MODE already
        try:
            import ray
        except ImportError:
            raise StepscopeError("--ray needs ray, which is not installed",
                                 hint="pip install 'stepscope[ray]'") from None
        self._ray = ray
        self._started = not ray.is_initialized()
        self._environ: dict[str, str] | None = environ if self._started else None
        local = address in (None, "", "local")
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                   "logging_level": logging.ERROR}
        if local and not os.environ.get("RAY_ADDRESS"):
            options["num_cpus"] = workers or default_workers()
        try:
            if self._started:
                ray.init(address=None if local else address, **options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            self.close()
            where = f"--ray {address}" if address else "--ray"
            raise StepscopeError(f"{where}: cannot start or reach Ray ({exc})") from None
        self.name = "a local Ray instance" if local else f"the Ray cluster at {address}"
        self._remote = ray.remote(_apply)

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        ray = self._ray
        fn_ref = ray.put(fn)
        pending = {self._remote.remote(fn_ref, item): i for i, item in enumerate(items)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # a worker crash, an object lost with its node
                    result = TaskError(f"the Ray task failed ({type(exc).__name__}: {exc})")
                yield i, result

    def close(self) -> None:
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
        self._started = False
        restore_environ(self._environ)
        self._environ = None


def make_engine(*, dask: str | None = None, ray: str | None = None, ray_requested: bool = False,
                workers: int | None = None) -> Engine:
    """The engine the command line asks for: --dask, --ray, or a local pool (one worker: this process)."""
    if dask is not None and ray_requested:
        raise StepscopeError("choose one of --dask and --ray")
    if dask is not None:
        return DaskEngine(dask, workers)
    if ray_requested:
        return RayEngine(ray, workers)
    if workers is not None and workers < 1:
        raise StepscopeError(f"--workers {workers}: must be 1 or more")
    return InProcess() if workers == 1 else LocalPool(workers)
