"""A trial under a training framework: the fixes the framework has a setting for (stepscope.frameworks, the table the
advice reads too) are made through it, by setting the configuration call's keywords as it is constructed:
TrainingArguments' fields (`dataloader_num_workers`, `bf16`, `torch_compile`, ...), Lightning Trainer's `precision`,
the Accelerator's `mixed_precision`. The call's site is recorded, where the patch then sets the same keywords.

Which framework runs the program is seen at the first optimizer step (its loop, or accelerate's optimizer wrapper,
is on the stack then), in every run; a trial with fixes is told it (TrialSpec.framework, from the baseline) before
the program builds anything.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import inspect
import os
import sys
from collections import Counter
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any

from stepscope.frameworks import FRAMEWORKS, Scaled, keywords
from stepscope.frameworks.detect import Site, detect
from stepscope.tune.points.failure import owned_by
from stepscope.tune.points.undo import Patcher, user_site
from stepscope.tune.wire import CallSite, FrameworkSite, Settings


def observe(settings: Settings, frame: FrameType | None) -> None:
    """Record the framework whose loop is on the stack from `frame` outwards (nothing for a plain loop)."""
    try:
        seen = detect(frame)
    except Exception:  # a help, never a failure of the trial
        return
    if seen is None:
        return

    def site(found: Site | None) -> CallSite | None:
        return CallSite(file=os.path.abspath(found.file), line=found.line) if found is not None else None

    recorded = settings.framework  # the configuration call the patch saw built wins over the one ast found
    settings.framework = FrameworkSite(
        name=seen.name, package=seen.package, config_name=seen.config_name,
        config=recorded.config if recorded is not None and recorded.config else site(seen.config),
        call=site(seen.call), loader=site(seen.loader))


class FrameworkPatch:
    """Wraps the framework's configuration class so that it is built with the carried fixes' keywords."""

    def __init__(self, settings: Settings, applied: Counter[str]) -> None:
        self.settings = settings
        self.applied = applied
        self.site: FrameworkSite | None = None  # the framework the baseline ran under
        self.fixes: dict[str, dict[str, Any]] = {}  # fix id -> the configuration call's keywords
        self.pid = os.getpid()

    def carries(self, fix_id: str, params: dict[str, Any]) -> bool:
        """Take `fix_id` when the framework has a setting for it (then no plain patch applies it)."""
        kw = keywords(self.site.name, fix_id, params) if self.site is not None else None
        if kw is None:
            return False
        self.fixes[fix_id] = kw
        return True

    def install(self, patcher: Patcher) -> None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        seen = []

        def first_step(optimizer: Any, args: Any, kwargs: Any) -> None:
            # Not removed here (torch iterates its hooks as this runs): a flag, then one test a step, until undone.
            if not seen and os.getpid() == self.pid:
                seen.append(True)
                observe(self.settings, sys._getframe(1))

        handle = register_optimizer_step_pre_hook(first_step)
        patcher.on_undo(handle.remove)
        if self.site is None or not self.fixes:
            return
        fw = FRAMEWORKS[self.site.name]

        def wrap(module: ModuleType) -> None:
            with owned_by(next(iter(self.fixes))):
                cls = getattr(module, fw.config[0])
                if dataclasses.is_dataclass(cls) and hasattr(cls, "__post_init__"):
                    self._wrap_post_init(patcher, cls)  # subclasses (Seq2SeqTrainingArguments) inherit it
                else:
                    self._wrap_init(patcher, cls)

        # The program imports the framework after the points are in place: its class is wrapped once it is defined.
        after_import(patcher, fw.modules.get(self.site.package, self.site.package), wrap)

    def _wrap_post_init(self, patcher: Patcher, cls: Any) -> None:
        original = cls.__post_init__
        patch = self

        def __post_init__(obj: Any) -> None:
            if os.getpid() == patch.pid:
                for fix, kw in patch.fixes.items():
                    with owned_by(fix):
                        for name, value in kw.items():
                            new = _value(value, getattr(obj, name, None))
                            if getattr(obj, name, None) != new:
                                setattr(obj, name, new)
                                patch.applied[fix] += 1
                patch._record()
            original(obj)

        patcher.replace(cls, "__post_init__", __post_init__)

    def _wrap_init(self, patcher: Patcher, cls: Any) -> None:
        original = cls.__init__
        signature = inspect.signature(original)
        patch = self

        def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
            if os.getpid() != patch.pid:
                return original(obj, *args, **kwargs)
            try:
                bound = signature.bind(obj, *args, **kwargs)
            except TypeError:  # arguments it does not take: let it say so itself
                return original(obj, *args, **kwargs)
            for fix, kw in patch.fixes.items():
                with owned_by(fix):
                    for name, value in kw.items():
                        param = signature.parameters.get(name)
                        default = param.default if param is not None else None
                        current = bound.arguments.get(name, default)
                        new = _value(value, current)
                        if current != new:
                            bound.arguments[name] = new
                            patch.applied[fix] += 1
            patch._record()
            return original(*bound.args, **bound.kwargs)

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        patcher.replace(cls, "__init__", __init__)

    def _record(self) -> None:
        """The user's configuration call: where the patch sets the same keywords."""
        file, line = user_site(3)
        if self.settings.framework is None and self.site is not None:
            self.settings.framework = FrameworkSite(name=self.site.name, package=self.site.package,
                                                    config_name=self.site.config_name)
        if self.settings.framework is not None and self.settings.framework.config is None and file:
            self.settings.framework.config = CallSite(file=file, line=line)


def _value(value: Any, current: Any) -> Any:
    if isinstance(value, Scaled):
        return value.factor * (current if isinstance(current, int) else value.default)
    return value


def after_import(patcher: Patcher, name: str, then: Callable[[ModuleType], None]) -> None:
    """`then(module)` once the module `name` has run (now, if it is imported already)."""
    if name in sys.modules:
        then(sys.modules[name])
        return
    watcher = _AfterImport(name, then)
    sys.meta_path.insert(0, watcher)
    patcher.on_undo(lambda: watcher in sys.meta_path and sys.meta_path.remove(watcher))


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `name` with the other finders, and runs `then` after its loader has executed it."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name, self.then = name, then
        self.loader: Any = None

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target) if finder is not self and hasattr(
                finder, "find_spec") else None
            if spec is not None:
                if spec.loader is not None:
                    self.loader, spec.loader = spec.loader, self
                return spec
        return None

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self.then(module)
