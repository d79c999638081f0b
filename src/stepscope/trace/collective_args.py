"""Collective metadata that the columnar model does not keep: process group, sequence number, message size.

Recent PyTorch writes these as args of `record_param_comms` ops (and copies them onto NCCL kernels):
`Collective name`, `Process Group Name`, `Seq`, `In msg nelems`, `dtype`, `Group size`. Gloo's own `gloo:*`
ranges carry only `Input Dims`/`Input type` (with record_shapes). This is a second, light pass over one rank's
file that decodes only the args of those events; the main reader stays as it is.
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from stepscope.errors import StepscopeError
from stepscope.trace.files import read_bytes

COLLECTIVE_EVENT_PREFIXES = ("nccl:", "gloo:", "rccl:", "ncclKernel", "ncclDevKernel", "rccl")
COLLECTIVE_EVENT_NAMES = ("record_param_comms",)

# Element sizes by the dtype names PyTorch writes: `dtype` args ("Float", "BFloat16") and `Input type`
# entries ("float", "c10::Half", "long int"), compared in lower case.
DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "c10::half": 2,
    "bfloat16": 2, "c10::bfloat16": 2, "long": 8, "long int": 8, "int64": 8, "int": 4, "int32": 4,
    "short": 2, "short int": 2, "int16": 2, "char": 1, "signed char": 1, "unsigned char": 1, "byte": 1,
    "bool": 1, "int8": 1, "uint8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1, "complexfloat": 8, "c10::complex<float>": 8, "complexdouble": 16,
}


@dataclass(frozen=True)
class CollectiveArgs:
    """What one collective event says about itself; None where the trace does not say."""

    collective: str | None = None  # "allreduce", "_allgather_base", ...
    group: str | None = None  # the process group's name, the same on every member rank
    seq: int | None = None  # the group's sequence number of this collective (p2p ops have none)
    bytes: int | None = None  # the input message size
    group_size: int | None = None


class _Args(msgspec.Struct, gc=False):
    collective: Any = msgspec.field(default=None, name="Collective name")
    group: Any = msgspec.field(default=None, name="Process Group Name")
    group_size: Any = msgspec.field(default=None, name="Group size")
    seq: Any = msgspec.field(default=None, name="Seq")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    dtype: Any = None
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_type: Any = msgspec.field(default=None, name="Input type")


class _Event(msgspec.Struct, gc=False):
    name: Any = None
    ts: Any = None
    args: msgspec.Raw = msgspec.Raw()


class _File(msgspec.Struct, gc=False):
    traceEvents: list[_Event] | None = None


_FILE = msgspec.json.Decoder(_File)
_LIST = msgspec.json.Decoder(list[_Event])
_ARGS = msgspec.json.Decoder(_Args)


def collective_args(path: str | Path, origin_us: float) -> dict[tuple[int, str], CollectiveArgs]:
    """Args of the collective events in a Kineto file, keyed by (start in ns from `origin_us`, name): the
    start the reader gives the same event. Empty when the file has none or cannot be decoded this way."""
    try:
        data = read_bytes(Path(path))
    except StepscopeError:
        return {}
    gc_was_enabled = gc.isenabled()
    gc.disable()  # many small acyclic objects
    try:
        events = _decode(data)
        del data
        found = [e for e in events if isinstance(e.name, str) and is_collective_name(e.name)]
        del events
    finally:
        if gc_was_enabled:
            gc.enable()
    result: dict[tuple[int, str], CollectiveArgs] = {}
    for event in found:
        args = _parse_args(event.args)
        start = _start_ns(event.ts, origin_us)
        if args is not None and start is not None:
            result[(start, event.name)] = args
    return result


def _decode(data: bytes | bytearray) -> list[_Event]:
    try:
        if bytes(data[:64]).lstrip()[:1] == b"[":
            return _LIST.decode(data)
        return _FILE.decode(data).traceEvents or []
    except (msgspec.DecodeError, msgspec.ValidationError):
        return []


def is_collective_name(name: str) -> bool:
    """A name that may carry collective args: record_param_comms, a backend range, an NCCL kernel."""
    return name in COLLECTIVE_EVENT_NAMES or name.startswith(COLLECTIVE_EVENT_PREFIXES)


def _start_ns(ts: Any, origin_us: float) -> int | None:
    """The reader's own arithmetic (float64 µs minus the origin, times 1000, rounded), so keys meet exactly."""
    try:
        value = float(ts)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(value):
        return None
    return int(np.rint((np.float64(value) - origin_us) * 1000.0))


def _parse_args(raw: msgspec.Raw) -> CollectiveArgs | None:
    if not raw:
        return None
    try:
        args = _ARGS.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    parsed = CollectiveArgs(
        collective=args.collective if isinstance(args.collective, str) else None,
        group=str(args.group) if isinstance(args.group, (str, int)) and not isinstance(args.group, bool) else None,
        seq=_int(args.seq),
        bytes=_message_bytes(args),
        group_size=_int(args.group_size),
    )
    return None if parsed == CollectiveArgs() else parsed


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _message_bytes(args: _Args) -> int | None:
    """`In msg nelems` times the dtype's size; else the tensor inputs' sizes from record_shapes."""
    nelems, size = _int(args.in_nelems), _dtype_bytes(args.dtype)
    if nelems is not None and size is not None:
        return nelems * size
    if not isinstance(args.input_dims, list) or not isinstance(args.input_type, list):
        return None
    total, known = 0, False
    for dims, dtype in zip(args.input_dims, args.input_type, strict=False):
        size = _dtype_bytes(dtype)
        count = _elements(dims)
        if size is not None and count is not None:
            total += size * count
            known = True
    return total if known else None


def _dtype_bytes(dtype: Any) -> int | None:
    return DTYPE_BYTES.get(dtype.strip().lower()) if isinstance(dtype, str) else None


def _elements(dims: Any) -> int | None:
    """Elements of a tensor's shape ([3, 4] -> 12); a scalar or an empty list is not a tensor here."""
    if not isinstance(dims, list) or not dims or not all(isinstance(d, int) and d >= 0 for d in dims):
        return None
    return math.prod(dims)
