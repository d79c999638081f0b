"""The same PyTorch-like loop, exported by Nsight Systems and by the PyTorch profiler, gets the same diagnosis.

`nsys_builder.training_loop` writes an nsys export of a loop with NVTX step ranges, pageable copies,
a sync after each copy, many tiny kernels and a per-step `.item()`. Replaying the same calls into the
Kineto builder gives the equivalent profiler trace; both must come out with the same verdict and fixes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import nsys_builder as nb
from builder import TraceBuilder
from stepscope import analyze

US = 1000.0  # the nsys builder speaks ns, the Kineto builder µs


class KinetoReplay:
    """Stands in for NsysBuilder: each call it receives is written as the Kineto event the profiler records."""

    def __init__(self, **_: Any) -> None:
        self.kineto = TraceBuilder()

    def runtime(self, name: str, start: int, end: int, tid: int = nb.MAIN_TID, pid: int = nb.PID) -> int:
        return self.kineto.runtime(name, start / US, end / US, tid=tid)

    def kernel(self, name: str, start: int, end: int, correlation: int, **_: Any) -> None:
        self.kineto.kernel(name, start / US, end / US, correlation=correlation, stream=nb.STREAM, device=nb.DEVICE)

    def memcpy(self, start: int, end: int, correlation: int, nbytes: int, copy_kind: int, src: int, dst: int,
               **_: Any) -> None:
        direction = {nb.HTOD: "HtoD", nb.DTOH: "DtoH", nb.DTOD: "DtoD"}[copy_kind]
        host = src if copy_kind == nb.HTOD else dst
        self.kineto.memcpy(direction, start / US, end / US, nbytes=nbytes, correlation=correlation,
                           host="Pinned" if host == nb.PINNED else "Pageable")

    def memset(self, start: int, end: int, correlation: int, nbytes: int, **_: Any) -> None:
        self.kineto.memset(start / US, end / US, nbytes=nbytes, correlation=correlation)

    def sync(self, start: int, end: int, correlation: int, sync_type: int, **_: Any) -> None:
        self.kineto._gpu("cuda_sync", "Stream Sync", start / US, end / US, correlation, nb.STREAM, nb.DEVICE)

    def nvtx_range(self, text: str, start: int, end: int | None, tid: int = nb.MAIN_TID, **_: Any) -> None:
        self.kineto.annotation(text, start / US, (end or start) / US, tid=tid)

    def nvtx_domain(self, *_: Any, **__: Any) -> None:
        pass

    def osrt(self, *_: Any, **__: Any) -> None:
        pass  # OS runtime calls have no Kineto counterpart

    def thread_name(self, *_: Any, **__: Any) -> None:
        pass


@pytest.fixture
def both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    nsys_path = nb.training_loop(steps=6, kernels_per_step=40).write(tmp_path / "loop.sqlite")
    monkeypatch.setattr(nb, "NsysBuilder", KinetoReplay)
    replay = nb.training_loop(steps=6, kernels_per_step=40)
    assert isinstance(replay, KinetoReplay)
    return nsys_path, replay.kineto.write(tmp_path / "loop.json.gz")


def test_same_steps_breakdown_and_verdict(both: tuple[Path, Path]) -> None:
    nsys_report, kineto_report = (analyze(p) for p in both)
    assert nsys_report.source.format == "nsys" and kineto_report.source.format == "kineto"
    assert nsys_report.summary.step_source == kineto_report.summary.step_source == "range train_step"
    assert [s.duration_us for s in nsys_report.steps] == [s.duration_us for s in kineto_report.steps]
    assert nsys_report.summary.breakdown_us == kineto_report.summary.breakdown_us
    assert nsys_report.summary.gpu_utilization == kineto_report.summary.gpu_utilization
    assert [(p.id, round(p.share, 3)) for p in nsys_report.patterns] == [
        (p.id, round(p.share, 3)) for p in kineto_report.patterns]
    assert [r.id for r in nsys_report.recommendations] == [r.id for r in kineto_report.recommendations]
    # The loop is built to show these: waiting on pageable copies and syncs, and tiny kernels.
    ids = {p.id for p in nsys_report.patterns}
    assert ids & {"copy_bound", "sync_bound", "launch_bound"}, ids
    recs = {r.id for r in nsys_report.recommendations}
    assert {"pin_memory", "non_blocking_copy"} <= recs, recs
