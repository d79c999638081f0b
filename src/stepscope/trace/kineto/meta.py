"""A Kineto trace's metadata: the accelerator, its devices (deviceProperties), rank and wall-clock origin, and the
profiler settings the trace names (torch.profiler's start_trace writes "record_shapes": "1" and so on for each
setting that is on, since torch 1.11; older traces say nothing, and replay/recorded.py infers them from the events)."""

from __future__ import annotations

from pathlib import Path

from stepscope.trace.kineto.dialect import accelerator_of
from stepscope.trace.kineto.schema import DeviceProperties, Scalar, TraceFile
from stepscope.trace.kineto.values import as_int
from stepscope.trace.model import DeviceInfo, Events, Kind, TraceMeta, distinct
from stepscope.trace.names import bounded_name


def trace_meta(parsed: TraceFile, path: Path, table: Events, strings: tuple[str, ...], t0: float, *,
               categories: set[str], process_names: dict[int, str],
               thread_names: dict[tuple[int, int], str], notes: list[str], call_stack_ops: int = 0) -> TraceMeta:
    runtime_names = {strings[i] for i in distinct(table.name[table.kind == Kind.RUNTIME])}
    device_names = [str(p.name) for p in parsed.deviceProperties or [] if p.name]
    accelerator = accelerator_of(device_names, runtime_names, categories)
    if accelerator == "none" and table.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET).any():
        accelerator = "cuda"
    info = parsed.distributedInfo or {}
    rank, world = info.get("rank"), info.get("world_size")
    base = as_int(parsed.baseTimeNanoseconds, 0)
    epoch = int(base + t0 * 1000) if base or t0 > 1e14 else None
    notes = list(notes)
    if not parsed.deviceProperties and accelerator in ("cuda", "rocm"):
        notes.append("the trace has no deviceProperties: device name and limits are unknown")
    devices = _device_infos(parsed.deviceProperties, accelerator, notes)
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
        start_epoch_ns=epoch if epoch is not None and 0 < epoch < 2**63 else None,
        origin_us=t0,
        process_names=process_names,
        thread_names=thread_names,
        notes=tuple(notes),
        profiler_settings=profiler_settings(parsed),
        call_stack_ops=call_stack_ops,
    )


PROFILER_SETTINGS = ("record_shapes", "profile_memory", "with_stack", "with_modules", "with_flops")


def profiler_settings(parsed: TraceFile) -> tuple[str, ...]:
    """The settings the profiler's metadata names as on ("1", as torch.profiler writes them)."""
    return tuple(name for name in PROFILER_SETTINGS if str(getattr(parsed, name)).strip() in ("1", "true", "True"))


def _device_infos(props: list[DeviceProperties] | None, accelerator: str, notes: list[str]) -> list[DeviceInfo]:
    infos = []
    for p in props or []:
        major, minor = as_int(p.computeMajor), as_int(p.computeMinor)
        device_id = as_int(p.id, len(infos))
        infos.append(
            DeviceInfo(
                id=device_id if 0 <= device_id < 2**31 else len(infos),
                name=bounded_name(str(p.name or "unknown device")),
                kind=accelerator if accelerator in ("cuda", "rocm") else "other",
                compute_capability=f"{major}.{minor}" if 0 <= major < 100 and 0 <= minor < 100 else None,
                total_memory_bytes=_count(p.totalGlobalMem, "totalGlobalMem", notes),
                sm_count=_count(p.numSms, "numSms", notes),
                warp_size=_count(p.warpSize, "warpSize", notes),
            )
        )
    return infos


def _count(value: Scalar, field: str, notes: list[str]) -> int | None:
    """A count from deviceProperties; zero and missing mean unknown, a negative one is noted and ignored."""
    count = as_int(value, 0)
    if count < 0 or count >= 2**63:
        notes.append(f"deviceProperties {field} {count} is not a count: taken as unknown")
        return None
    return count or None
