"""`uint8_transfer` for a transform written with torchvision's functional calls: a function of the program whose
result is `normalize(to_tensor(x), mean, std)` or `to_tensor(x)`, directly or through one name
(`t = to_tensor(x)`, then `return normalize(t, mean, std)`). The calls are recognised by what their names resolve
to in the function's module (`torchvision.transforms.functional`'s `to_tensor` and `normalize`); in a trial, the
function is rebuilt from its source with `to_tensor(x)` made a uint8 conversion and the normalisation left to the
device. Functions with a closure, or with anything else done to the float tensor, are left alone.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from dataclasses import dataclass
from typing import Any

from stepscope.tune.points.failure import owned_by
from stepscope.tune.points.uint8_image import to_uint8_chw

UINT8 = "__stepscope_to_uint8__"


@dataclass(frozen=True)
class Shape:
    """Where in the function's source the two calls are (positions in its `ast`)."""

    to_tensor: ast.Call
    normalize: ast.Call | None  # None: the function ends at to_tensor
    through: str | None  # the name the float tensor passes through, if any


def _resolve(node: ast.expr, scope: dict[str, Any]) -> Any:
    """A dotted name's object in the function's globals (nothing is called)."""
    if isinstance(node, ast.Name):
        return scope.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, scope)
        return getattr(owner, node.attr, None) if owner is not None else None
    return None


def _is(node: ast.expr, scope: dict[str, Any], name: str) -> bool:
    target = _resolve(node, scope) if isinstance(node, (ast.Name, ast.Attribute)) else None
    return (getattr(target, "__name__", "") == name
            and str(getattr(target, "__module__", "")).startswith("torchvision.transforms"))


def function_of(fn: Any) -> ast.FunctionDef | None:
    if not isinstance(fn, types.FunctionType) or fn.__closure__:
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    node = tree.body[0] if tree.body else None
    return node if isinstance(node, ast.FunctionDef) else None


def named(node: ast.expr, name: str) -> bool:
    """The call's name is `name` (the patch writer's test: it has the source, not the program's objects)."""
    return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)


def shape_of(fdef: ast.FunctionDef, scope: dict[str, Any] | None) -> Shape | None:
    """The to_tensor (and normalize) calls the function ends in, when nothing else uses the float tensor; the calls
    resolved in `scope` (the function's globals), or known by their names alone when it is None."""
    def calls(node: ast.expr, name: str) -> bool:
        return named(node, name) if scope is None else _is(node, scope, name)

    last = fdef.body[-1] if fdef.body else None
    if not isinstance(last, ast.Return) or not isinstance(last.value, ast.Call):
        return None
    value = last.value
    if calls(value.func, "to_tensor") and len(value.args) == 1:
        return Shape(value, None, None)
    if not calls(value.func, "normalize") or not value.args:
        return None
    first = value.args[0]
    if isinstance(first, ast.Call) and calls(first.func, "to_tensor") and len(first.args) == 1:
        return Shape(first, value, None)
    if isinstance(first, ast.Name) and len(fdef.body) >= 2:
        assign = fdef.body[-2]
        uses = [n for n in ast.walk(fdef) if isinstance(n, ast.Name) and n.id == first.id]
        if (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name)
                and assign.targets[0].id == first.id and isinstance(assign.value, ast.Call)
                and calls(assign.value.func, "to_tensor") and len(assign.value.args) == 1 and len(uses) == 2):
            return Shape(assign.value, value, first.id)
    return None


def mean_std(call: ast.Call | None, scope: dict[str, Any]) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """normalize's mean and std, when they are literals or names of the module."""
    if call is None:
        return None
    given = dict(zip(("tensor", "mean", "std"), call.args, strict=False)) | {k.arg: k.value for k in call.keywords
                                                                               if k.arg}
    values = []
    for key in ("mean", "std"):
        node = given.get(key)
        try:
            value = ast.literal_eval(node) if node is not None else None
        except ValueError:
            value = _resolve(node, scope) if node is not None else None
        if not isinstance(value, (list, tuple)) or not all(isinstance(x, (int, float)) for x in value):
            return None
        values.append(tuple(float(x) for x in value))
    return values[0], values[1]


class _Cut(ast.NodeTransformer):
    def __init__(self, shape: Shape) -> None:
        self.shape = shape

    def visit_Call(self, node: ast.Call) -> Any:
        if node is self.shape.to_tensor:
            return ast.Call(func=ast.Name(id=UINT8, ctx=ast.Load()), args=node.args, keywords=[])
        if node is self.shape.normalize:
            return self.visit(node.args[0])  # the normalisation goes to the device
        return self.generic_visit(node)


class Uint8Function:
    """The program's transform function rebuilt without its float conversion, in the worker that calls it."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self._built: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"fn": self.fn}  # a spawned worker rebuilds it

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.fn, self._built = state["fn"], None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._built is None:
            self._built = rebuild(self.fn)
        return self._built(*args, **kwargs)


def _to_uint8(picture: Any) -> Any:
    with owned_by("uint8_transfer"):
        return to_uint8_chw(picture)


def rebuild(fn: Any) -> Any:
    fdef = function_of(fn)
    shape = shape_of(fdef, fn.__globals__) if fdef is not None else None
    if fdef is None or shape is None:
        raise ValueError(f"{fn.__qualname__} is no longer a transform ending in to_tensor")
    fdef.decorator_list = []
    module = ast.fix_missing_locations(ast.Module(body=[_Cut(shape).visit(fdef)], type_ignores=[]))
    scope = dict(fn.__globals__, **{UINT8: _to_uint8})
    exec(compile(module, inspect.getsourcefile(fn) or "<transform>", "exec"), scope)
    return scope[fdef.name]
