"""The reader's columns gathered in C (trace/kineto/_gather.c) are the columns its Python road builds: field by
field on planted values (what C takes, and what it leaves to Python: None, strings, bools, floats into an int column,
ints no int64 holds, items of another type), and whole traces read both ways, column by column."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec
import numpy as np
import pytest

from conftest import kineto_trace
from stepscope.trace.kineto import gather, read_kineto

_gather = pytest.importorskip("stepscope.trace.kineto._gather")
fill = _gather.fill
DATA = Path(__file__).parent / "data"


class Item(msgspec.Struct):
    a: object = -1
    b: object = float("nan")


def _fill(items: list, kinds: str = "qd") -> tuple[tuple[bool, ...], list[np.ndarray]]:
    outs = [np.zeros(len(items), dtype=np.int64 if k == "q" else np.float64) for k in kinds]
    names = ("a", "b")[: len(kinds)]
    return fill(items, names, tuple(outs), kinds.encode()), outs


def test_plain_ints_and_floats_are_copied() -> None:
    ok, (a, b) = _fill([Item(0, 1.5), Item(-1, 2), Item(2**63 - 1, -0.25), Item(-(2**63), 10**20)])
    assert ok == (True, True)
    assert a.tolist() == [0, -1, 2**63 - 1, -(2**63)]
    assert b.tolist() == [1.5, 2.0, -0.25, 1e20]  # an int into a float column: float(int)


@pytest.mark.parametrize("value", [None, "12", True, 1.5, 2**63, -(2**63) - 1, [1]])
def test_an_int_column_leaves_anything_but_an_int64_to_python(value: object) -> None:
    ok, _ = _fill([Item(1), Item(value), Item(3)], "q")
    assert ok == (False,)


@pytest.mark.parametrize("value", [None, "1.5", True, 2**1100])
def test_a_float_column_leaves_anything_but_a_float_or_an_int_to_python(value: object) -> None:
    ok, (a, _) = _fill([Item(1, 0.5), Item(2, value)])
    assert ok == (True, False)  # the other field of the same items is still taken
    assert a.tolist() == [1, 2]


def test_items_of_another_type_or_a_missing_field_are_left_to_python() -> None:
    class Other(msgspec.Struct):
        a: object = 1

    assert _fill([Item(1), Other()], "q")[0] == (False,)
    assert fill([Other()], ("b",), (np.zeros(1, dtype=np.int64),), b"q") == (False,)  # Other has no field b
    assert fill([], ("a",), (np.zeros(0, dtype=np.int64),), b"q") == (False,)


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError):
        fill([Item()], ("a",), (np.zeros(2, dtype=np.int64),), b"q")  # not 8 bytes per item
    with pytest.raises(ValueError):
        fill([Item()], ("a",), (np.zeros(1, dtype=np.int64),), b"x")
    with pytest.raises(BufferError):
        fill([Item()], ("a",), (b"12345678",), b"q")  # not writable


def test_a_fields_objects_are_listed_with_none_replaced_when_asked() -> None:
    marker = object()
    items = [Item("x", 1.0), Item(None, 2.0), Item(3, None)]
    assert _gather.objects(items, "a", None) == ["x", None, 3]
    assert _gather.objects(items, "a", marker) == ["x", marker, 3]
    assert gather.field_values(items, "b", marker) == [1.0, 2.0, marker]
    assert _gather.objects([*items, 1], "a", None) is None  # not all of one type
    assert _gather.objects(items, "nope", None) is None
    assert _gather.objects([], "a", None) is None


def test_type_codes_follow_the_table_and_leave_an_unknown_type_to_python() -> None:
    class Other(msgspec.Struct):
        pass

    items = [Item(), Other(), Other(), Item()]
    assert gather.type_codes(items, {Item: 1, Other: -3}).tolist() == [1, -3, -3, 1]
    out = np.zeros(4, dtype=np.int8)
    assert _gather.codes(items, {Item: 1}, out) is False
    with pytest.raises(KeyError):
        gather.type_codes(items, {Item: 1})  # what the Python road raises


def _columns(trace: object) -> dict[str, np.ndarray]:
    return {f"{table}.{f.name}": getattr(getattr(trace, table), f.name)
            for table in ("events", "memory") for f in dataclasses.fields(getattr(trace, table))}


@pytest.mark.parametrize("path", [
    "v100_ddp_train_rank1.json.gz", "old_categories_inference_rank1.json.gz", "mi250_rocm_toy_train.json.gz",
    "v100_resnet_ns_units.json.gz", "a100_recsys_ddp_rank0.json.gz", str(DATA / "gpu_h100" / "big_matmul"),
])
def test_a_trace_read_with_and_without_c_has_the_same_columns(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    file = Path(path) if path.startswith("/") else kineto_trace(path)
    if file.is_dir():
        file = file / "trace.json.gz"
    with_c = read_kineto(file)
    for name in ("_fill", "_objects", "_codes"):
        monkeypatch.setattr(gather, name, None)
    without = read_kineto(file)
    assert with_c.strings == without.strings and with_c.meta == without.meta
    a, b = _columns(with_c), _columns(without)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
