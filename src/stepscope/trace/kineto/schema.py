"""What stepscope reads of a Kineto trace, as msgspec types: the file's top level and each event.

Every field the readers do not name is skipped by the decoder, never built.
"""

from __future__ import annotations

from typing import Union

import msgspec

Scalar = int | float | str | None


class Args(msgspec.Struct, gc=False):
    """The span args stepscope reads. Absent ids default to -1 (the model's "absent"), not None, so that a column
    of them converts to numpy in one C loop; an explicit null takes the slower path that handles it."""

    external_id: Scalar = msgspec.field(default=-1, name="External id")
    external_id_old: Scalar = msgspec.field(default=-1, name="external id")
    correlation: Scalar = -1
    sequence: Scalar = msgspec.field(default=-1, name="Sequence number")
    fwd_tid: Scalar = msgspec.field(default=-1, name="Fwd thread id")
    device: Scalar = -1
    stream: Scalar = -1
    bytes: Scalar = -1
    flops: Scalar = float("nan")
    # record_shapes: kept raw and interned (kineto.inputs), decoded once per distinct signature
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")  # empty when absent
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Concrete Inputs")
    # with_stack before the Python tracer (torch < 1.11): each op's Python stack as one string; only counted
    call_stack: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Call stack")


class MemoryArgs(msgspec.Struct, gc=False):
    mem_bytes: Scalar = msgspec.field(default=None, name="Bytes")
    total_allocated: Scalar = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Scalar = msgspec.field(default=None, name="Total Reserved")
    device_type: Scalar = msgspec.field(default=None, name="Device Type")
    device_id: Scalar = msgspec.field(default=None, name="Device Id")
    addr: Scalar = msgspec.field(default=None, name="Addr")


class NameArgs(msgspec.Struct, gc=False):
    name: Scalar = None


# A tagged union on "ph": spans decode fully, flows and counters decode to empty structs.
class Span(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    cat: str | None = None
    name: Scalar = None
    pid: Scalar = -1
    tid: Scalar = -1
    ts: float | None = None  # a string here sends the batch down the lenient path, which converts it
    dur: float | None = None
    args: Args | None = None


class Instant(msgspec.Struct, tag_field="ph", tag="i", gc=False):
    name: Scalar = None
    ts: float | None = None
    pid: Scalar = None
    tid: Scalar = None
    args: MemoryArgs | None = None


class InstantUpper(Instant, tag="I"):
    pass


class Metadata(msgspec.Struct, tag_field="ph", tag="M", gc=False):
    name: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
    args: NameArgs | None = None


_IGNORED_PHASES = "BEbneCstfPNODVvRc()"
_Ignored = tuple(
    msgspec.defstruct(f"_Ignored{i}", [], tag_field="ph", tag=ph, gc=False) for i, ph in enumerate(_IGNORED_PHASES)
)
EVENT_TYPES = (Span, Instant, InstantUpper, Metadata, *_Ignored)
AnyEvent = Union[(Span, Instant, InstantUpper, Metadata, *_Ignored)]


class DeviceProperties(msgspec.Struct, gc=False):
    id: Scalar = None
    name: Scalar = None
    totalGlobalMem: Scalar = None
    computeMajor: Scalar = None
    computeMinor: Scalar = None
    numSms: Scalar = None
    warpSize: Scalar = None


class TraceFile(msgspec.Struct, gc=False):
    traceEvents: list[msgspec.Raw] | None = None
    deviceProperties: list[DeviceProperties] | None = None
    distributedInfo: dict | None = None
    baseTimeNanoseconds: Scalar = None
    nodes: msgspec.Raw | None = None  # a PyTorch execution trace, not a profiler trace
    # The profiler's own metadata: torch.profiler's start_trace writes "1" for each of these settings that is on.
    record_shapes: Scalar = None
    profile_memory: Scalar = None
    with_stack: Scalar = None
    with_modules: Scalar = None
    with_flops: Scalar = None


FILE_DECODER = msgspec.json.Decoder(TraceFile)
LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
BATCH_DECODER = msgspec.json.Decoder(list[AnyEvent])  # type: ignore[valid-type]
# One event at a time, for a batch with a type surprise: numbers written as strings ("12") are converted.
EVENT_DECODER = msgspec.json.Decoder(AnyEvent, strict=False)  # type: ignore[var-annotated]
