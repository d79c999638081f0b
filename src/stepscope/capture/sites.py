"""Where the user's code built an object (a DataLoader, an optimizer): fixes point at that line."""

from __future__ import annotations

import functools
import linecache
import os
import sys
import weakref
from typing import Any

from stepscope.attribution.usercode import UserCode


class Sites:
    """`recorder(cls.__init__)` wraps a constructor so each new object remembers the first user frame
    that built it; `location(obj)` gives {file, line, function, code} or None."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._by_object: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
        self._user: Any = None

    def recorder(self, original: Any) -> Any:
        sites = self

        @functools.wraps(original)
        def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
            original(obj, *args, **kwargs)
            if os.getpid() == sites.pid:
                sites._remember(obj, sys._getframe(1))

        return __init__

    def _remember(self, obj: Any, frame: Any) -> None:
        try:
            if obj in self._by_object:  # a subclass's __init__ called ours through super(): the outer call wins
                return
            location = self._locate(frame)
            if location is not None:
                self._by_object[obj] = location
        except Exception:  # not weak-referenceable or not hashable: no location, never a failure
            return

    def _locate(self, frame: Any) -> dict[str, Any] | None:
        if self._user is None:
            self._user = UserCode()
        user = self._user.user_frame(frame)
        if user is None:
            return None
        code = user.f_code
        return {"file": self._user.display(code.co_filename) or code.co_filename, "line": user.f_lineno,
                "function": getattr(code, "co_qualname", code.co_name),
                "code": linecache.getline(code.co_filename, user.f_lineno).strip()}

    def location(self, obj: Any) -> dict[str, Any] | None:
        try:
            return self._by_object.get(obj)
        except TypeError:
            return None
