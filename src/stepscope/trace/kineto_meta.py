"""A Kineto trace's metadata: the accelerator, its devices (deviceProperties), rank and wall-clock origin."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stepscope.trace.kineto_dialect import accelerator_of
from stepscope.trace.kineto_schema import DeviceProperties, TraceFile
from stepscope.trace.kineto_values import as_int
from stepscope.trace.model import DeviceInfo, Events, Kind, TraceMeta


def trace_meta(parsed: TraceFile, path: Path, table: Events, strings: tuple[str, ...], t0: float, *,
               categories: set[str], process_names: dict[int, str],
               thread_names: dict[tuple[int, int], str]) -> TraceMeta:
    runtime_names = {strings[i] for i in np.unique(table.name[table.kind == Kind.RUNTIME])}
    device_names = [str(p.name) for p in parsed.deviceProperties or [] if p.name]
    accelerator = accelerator_of(device_names, runtime_names, categories)
    if accelerator == "none" and table.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET).any():
        accelerator = "cuda"
    info = parsed.distributedInfo or {}
    rank, world = info.get("rank"), info.get("world_size")
    base = as_int(parsed.baseTimeNanoseconds, 0)
    notes = []
    if not parsed.deviceProperties and accelerator in ("cuda", "rocm"):
        notes.append("the trace has no deviceProperties: device name and limits are unknown")
    devices = _device_infos(parsed.deviceProperties, accelerator)
    if accelerator == "other":
        family = sorted(c.split("_")[0].upper() for c in categories if c.split("_")[0] != "cpu")
        devices = devices or [DeviceInfo(id=0, name=f"{family[0] if family else 'unknown'} accelerator",
                                         kind="other")]
        notes.append("device events come from a non-GPU accelerator: GPU analyses do not apply")
    return TraceMeta(
        path=str(path),
        format="kineto",
        devices=tuple(devices),
        rank=rank if isinstance(rank, int) else None,
        world_size=world if isinstance(world, int) else None,
        accelerator=accelerator,
        start_epoch_ns=int(base + t0 * 1000) if base or t0 > 1e14 else None,
        origin_us=t0,
        process_names=process_names,
        thread_names=thread_names,
        notes=tuple(notes),
    )


def _device_infos(props: list[DeviceProperties] | None, accelerator: str) -> list[DeviceInfo]:
    infos = []
    for p in props or []:
        major, minor = as_int(p.computeMajor), as_int(p.computeMinor)
        infos.append(
            DeviceInfo(
                id=as_int(p.id, len(infos)),
                name=str(p.name or "unknown device"),
                kind=accelerator if accelerator in ("cuda", "rocm") else "other",
                compute_capability=f"{major}.{minor}" if major >= 0 and minor >= 0 else None,
                total_memory_bytes=as_int(p.totalGlobalMem, 0) or None,
                sm_count=as_int(p.numSms, 0) or None,
                warp_size=as_int(p.warpSize, 0) or None,
            )
        )
    return infos
