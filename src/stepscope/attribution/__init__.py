"""Source attribution at capture time: annotate the recorded window with the user's lines and module paths.

Capture wraps the recorded window (the profiler's active steps, not its warm-up) like this:

    from stepscope.attribution import Attribution
    attribution = Attribution(code_root=None)   # or a folder, or several: what counts as the user's code
    attribution.start()   # on the thread that runs the steps, when the profiler starts recording
    ...                   # the recorded steps
    attribution.stop()    # same thread, when the last recorded step ends (before or after prof.stop())

or `with stepscope.attribution.enable(): ...` around the recorded steps. Outside start()/stop() nothing
of it is installed. It needs no `with_stack`: the ranges are ordinary record_function annotations, so
the trace alone carries the attribution. It never raises into the program: a failure to install leaves
the run unattributed and says why in `error`.
"""

from __future__ import annotations

import contextlib
import sys
from types import TracebackType
from typing import Any

from stepscope.attribution.usercode import CodeRoot, UserCode

_NO_MODE: Any = object()  # started without a mode (torch.compile in use)


def torch_compile_in_use() -> bool:
    """Whether torch.compile has compiled anything in this process."""
    if "torch._dynamo" not in sys.modules:
        return False
    try:
        from torch._dynamo.utils import counters

        return bool(counters["stats"]["unique_graphs"])
    except Exception:
        return True


class Attribution:
    """Line ranges for torch calls and module ranges for module forwards, between start() and stop()."""

    def __init__(self, code_root: CodeRoot = None, *, modules: bool = True, compiled: bool | None = None,
                 libraries: bool = False, fetch: Any = None) -> None:
        """`compiled`: whether torch.compile runs in the window (None: whether it has compiled anything yet);
        `libraries`: installed libraries' code counts as the user's (the lines below `trainer.train()`); `fetch`:
        the instrumentation layer's fetch slot (line_ranges.FetchSlot), so the DataLoader is not patched twice."""
        self.code_root = code_root
        self.fetch = fetch
        self.libraries = libraries
        self.modules = modules
        self.compiled = compiled
        self.error: str | None = None  # why attribution is off or did not stop cleanly
        self.note: str | None = None  # how it is limited (torch.compile in use)
        self._mode: Any = None
        self._patches: Any = None
        self._module_ranges: Any = None

    @property
    def active(self) -> bool:
        return self._mode is not None

    def start(self) -> None:
        """Install the mode, the call-site patches and the module hooks (a second call does nothing)."""
        if self._mode is not None:
            return
        try:
            line_ranges, module_ranges = _torch_side()
            line_ranges.sweep()  # a mode stopped inside its own handler earlier comes off before another goes on

            user = UserCode(self.code_root, libraries=self.libraries)
            self._patches = line_ranges.CallSitePatches(user, self.fetch)
            if self.compiled if self.compiled is not None else torch_compile_in_use():
                # torch.compile guards on the mode stack and the global module hooks: installing either would
                # recompile inside the window. Only the call sites are annotated then.
                self.note = ("torch.compile is in use: lines are those that call into torch and compiled code, "
                             "without modules")
                self._patches.install(None)
                self._mode = _NO_MODE
                return
            mode = line_ranges.LineMode(user)
            self._patches.install(mode)
            if self.modules:
                self._module_ranges = module_ranges.ModuleRanges(user)
                self._module_ranges.install()
            mode.__enter__()
            self._mode = mode
        except Exception as exc:  # never cost the run: go on unattributed
            self.error = f"source attribution is off: {type(exc).__name__}: {exc}"
            self._remove_hooks()

    def stop(self) -> None:
        """Take everything out again: the mode comes off this thread's mode stack wherever it sits."""
        mode, self._mode = self._mode, None
        if mode is not None and mode is not _NO_MODE:
            mode.active = False
            try:
                _torch_side()[0].take_off(mode)  # on another thread's stack it stays, disarmed: it passes calls on
            except Exception as exc:
                self.error = f"source attribution did not stop cleanly: {type(exc).__name__}: {exc}"
        self._remove_hooks()

    def _remove_hooks(self) -> None:
        for part in (self._module_ranges, self._patches):
            if part is not None:
                try:
                    part.remove()
                except Exception as exc:
                    self.error = f"source attribution did not stop cleanly: {type(exc).__name__}: {exc}"
        self._module_ranges = self._patches = None

    def __enter__(self) -> Attribution:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class Survey:
    """Counts the torch calls of each user line between start() and stop() (no ranges, nothing recorded), to
    tell whether one line runs nearly everything (a `trainer.train()` call)."""

    def __init__(self, code_root: CodeRoot = None) -> None:
        self.code_root = code_root
        self._mode: Any = None

    def start(self) -> None:
        if self._mode is not None or torch_compile_in_use():  # a mode would make torch.compile recompile
            return
        try:
            line_ranges = _torch_side()[0]
            line_ranges.sweep()
            self._mode = line_ranges.LineSurvey(UserCode(self.code_root))
            self._mode.__enter__()
        except Exception:
            self._mode = None

    def stop(self) -> tuple[float, str | None]:
        """The share of the calls made by the busiest line, and that line ('train.py:40'); (0, None) if none."""
        mode, self._mode = self._mode, None
        if mode is None:
            return 0.0, None
        mode.active = False
        with contextlib.suppress(Exception):  # never cost the run
            _torch_side()[0].take_off(mode)
        total = sum(mode.counts.values())
        if not total:
            return 0.0, None
        (file, line), top = mode.counts.most_common(1)[0]
        return top / total, f"{mode.user.display(file) or file}:{line}"


def _torch_side() -> tuple[Any, Any]:
    """The line-range and module-range modules, loaded when a window starts: they import torch, and this package is
    imported inside the user's program before the program has imported it."""
    from stepscope.attribution import line_ranges, module_ranges

    return line_ranges, module_ranges


def enable(code_root: CodeRoot = None, *, modules: bool = True, compiled: bool | None = None) -> Attribution:
    """An Attribution to use as a context manager around the recorded steps."""
    return Attribution(code_root, modules=modules, compiled=compiled)


__all__ = ["Attribution", "Survey", "enable"]
