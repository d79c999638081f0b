"""Traces: one columnar model, and readers that map every dialect into it."""

from stepscope.trace.model import (
    CopyKind,
    DeviceInfo,
    Events,
    HostMemory,
    Kind,
    MemoryEvents,
    Trace,
    TraceMeta,
)

__all__ = ["CopyKind", "DeviceInfo", "Events", "HostMemory", "Kind", "MemoryEvents", "Trace", "TraceMeta"]
