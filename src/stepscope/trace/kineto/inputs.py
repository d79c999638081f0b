"""Kineto's recorded op inputs (record_shapes): "Input Dims", "Input type", "Concrete Inputs".

Most ops repeat the same few input signatures every step, so the raw JSON of the three args is interned
as one key per op and decoded once per distinct key.
"""

from __future__ import annotations

from typing import Any

import msgspec

from stepscope.trace.model import NONE, OpInputs


def _as_tuple(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_as_tuple(v) for v in value)
    return value


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v if isinstance(v, str) else msgspec.json.encode(v).decode() for v in value)


class InputsInterner:
    """Raw (dims, types, concrete) JSON -> a small index; `table()` decodes each distinct one once."""

    def __init__(self) -> None:
        self._index: dict[bytes, int] = {}

    def intern(self, dims: msgspec.Raw, types: msgspec.Raw, concrete: msgspec.Raw) -> int:
        """The index of one op's inputs; -1 when the op has none recorded (an empty Raw)."""
        if not dims:
            return NONE
        key = b"\x00".join(bytes(r) or b"null" for r in (dims, types, concrete))
        index = self._index.get(key)
        if index is None:
            index = self._index[key] = len(self._index)
        return index

    def table(self) -> tuple[OpInputs, ...]:
        found = []
        for key in self._index:
            dims, types, concrete = (_decode(part) for part in key.split(b"\x00"))
            found.append(OpInputs(dims=_as_tuple(dims) if isinstance(dims, list) else (),
                                  types=_strings(types), concrete=_strings(concrete)))
        return tuple(found)


def _decode(raw: bytes) -> Any:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
