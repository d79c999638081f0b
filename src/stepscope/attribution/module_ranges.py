"""Module ranges: every nn.Module forward runs inside a `stepscope.module|model.layer1.0.conv1` range.

Global forward hooks see every module call; a per-thread stack of the modules running gives each call
its path: the parent's path plus the name under which the parent holds the child. The outermost module
is named after the variable the user's code holds it in (`model`), else after its class.
"""

from __future__ import annotations

import sys
import threading
from types import FrameType
from typing import Any

from torch._C._profiler import _RecordFunctionFast
from torch.compiler import is_compiling as _compiling

from stepscope.attribution.usercode import UserCode
from stepscope.trace.source_annotations import module_annotation


def _child_name(parent: Any, child: Any) -> str:
    """The name under which `parent` holds `child` ('layer1.0' for a grandchild), else the class name."""
    for name, module in parent._modules.items():
        if module is child:
            return name
    for name, module in parent.named_modules(remove_duplicate=False):
        if module is child and name:
            return name
    return type(child).__name__


def _name_in_frame(frame: FrameType | None, module: Any) -> str | None:
    """A variable (or an attribute of `self`, or a submodule of a variable) that holds `module` in `frame`."""
    if frame is None:
        return None
    scopes = (frame.f_locals, frame.f_globals)
    for scope in scopes:
        for name, value in scope.items():
            if value is module and not name.startswith("_"):
                return name
    owner = frame.f_locals.get("self")
    if owner is not None and isinstance(getattr(owner, "_modules", None), dict):
        for name, value in owner._modules.items():
            if value is module:
                return name
    import torch

    for scope in scopes:
        for name, value in list(scope.items()):
            if isinstance(value, torch.nn.Module) and not name.startswith("_"):
                for sub, inner in value.named_modules(remove_duplicate=False):
                    if inner is module and sub:
                        return f"{name}.{sub}"
    return None


class ModuleRanges:
    """Installs the two global hooks; `remove()` takes them out and closes any range left open."""

    def __init__(self, user: UserCode) -> None:
        self.user = user
        self._local = threading.local()
        self._handles: list[Any] = []
        self._roots: dict[int, str] = {}  # id(module) -> root name
        self._children: dict[tuple[str, int], tuple[str, str]] = {}  # (parent path, id(child)) -> (path, range)

    def install(self) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._handles = [register_module_forward_pre_hook(self._before),
                         register_module_forward_hook(self._after, always_call=True)]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        stack = getattr(self._local, "stack", [])
        while stack:
            stack.pop()[2].__exit__(None, None, None)
        self._roots.clear()
        self._children.clear()

    def _stack(self) -> list:
        try:
            return self._local.stack
        except AttributeError:
            self._local.stack = []
            return self._local.stack

    def _before(self, module: Any, args: Any) -> None:
        if _compiling():  # torch.compile tracing: leave nothing for it to trace
            return
        try:
            stack = self._stack()
            if stack:
                parent_path, parent = stack[-1][0], stack[-1][1]
                key = (parent_path, id(module))
                found = self._children.get(key)
                if found is None:
                    path = f"{parent_path}.{_child_name(parent, module)}"
                    found = self._children[key] = (path, module_annotation(path))
            else:
                path = self._root_name(module)
                found = (path, module_annotation(path))
            record = _RecordFunctionFast(found[1])
            record.__enter__()
            stack.append((found[0], module, record))
        except Exception:  # attribution must never break the user's forward
            return

    def _after(self, module: Any, args: Any, output: Any) -> None:
        if _compiling():
            return
        stack = self._stack()
        if stack and stack[-1][1] is module:
            stack.pop()[2].__exit__(None, None, None)
            return
        if not any(entry[1] is module for entry in stack):  # its range never opened
            return
        while stack:  # inner ranges whose end was missed close with it
            _, running, record = stack.pop()
            record.__exit__(None, None, None)
            if running is module:
                return

    def _root_name(self, module: Any) -> str:
        name = self._roots.get(id(module))
        if name is None:
            frame = self.user.user_frame(sys._getframe(2))
            name = self._path_in_owner(frame, module) or _name_in_frame(frame, module) or type(module).__name__
            self._roots[id(module)] = name
        return name

    def _path_in_owner(self, frame: FrameType | None, module: Any) -> str | None:
        """A module called from inside another module's forward with no range open (the window began inside
        that forward): its `named_modules()` path under that module, not the loop variable that holds it."""
        import torch

        owner = frame.f_locals.get("self") if frame is not None else None
        if not isinstance(owner, torch.nn.Module) or owner is module:
            return None
        for sub, inner in owner.named_modules(remove_duplicate=False):
            if inner is module and sub:
                outer = self._roots.get(id(owner)) or _name_in_frame(self.user.user_frame(frame.f_back), owner)
                return f"{outer or type(owner).__name__}.{sub}"
        return None
