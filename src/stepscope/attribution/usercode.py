"""Which frames are the user's own code, and the line annotation for the first such frame up a stack.

User code is code outside the Python standard library, site-packages, torch and stepscope itself; a
`code_root` (one folder or several) replaces that rule: then user code is exactly the code under it. With
`libraries=True` the code of installed libraries counts too (only the standard library, torch and
stepscope do not): the lines below a user line that runs everything (`trainer.train()`).
"""

from __future__ import annotations

import linecache
import os
import site
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path
from types import FrameType

from stepscope.trace.source_annotations import line_annotation

CodeRoot = str | os.PathLike | Iterable[str | os.PathLike] | None
_UNKNOWN = object()
_STEPSCOPE_DIR = str(Path(__file__).resolve().parents[1])


def _folder(path: str | os.PathLike) -> str:
    return os.path.join(os.path.realpath(os.path.abspath(path)), "")


def library_folders() -> tuple[str, ...]:
    """The standard library, every site-packages folder, and torch's own folder."""
    paths = sysconfig.get_paths()
    found = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    found.update(getattr(site, "getsitepackages", list)())
    found.add(site.getusersitepackages() if hasattr(site, "getusersitepackages") else None)
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        found.add(os.path.dirname(torch.__file__))
    return tuple(sorted(_folder(p) for p in found if p))


def standard_and_torch_folders() -> tuple[str, ...]:
    """The standard library and torch's own folder: never the place to blame, whatever calls into them."""
    paths = sysconfig.get_paths()
    found = {paths.get(k) for k in ("stdlib", "platstdlib")}
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        found.add(os.path.dirname(torch.__file__))
    return tuple(sorted(_folder(p) for p in found if p))


def installed_name(path: str) -> str | None:
    """An installed library's file as its package path (`transformers/trainer.py`); None for other files."""
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        if marker in path:
            return path.split(marker, 1)[1]
    return None


class UserCode:
    """Classifies files (cached per file name) and names the line annotation of the first user frame."""

    def __init__(self, code_root: CodeRoot = None, libraries: bool = False) -> None:
        self.libraries = libraries
        if code_root is None:
            self.roots: tuple[str, ...] | None = None
        elif isinstance(code_root, (str, os.PathLike)):
            self.roots = (_folder(code_root),)
        else:
            self.roots = tuple(_folder(p) for p in code_root)
        self.excluded = library_folders()
        self.never = standard_and_torch_folders()  # not even with libraries=True
        self.cwd = _folder(os.getcwd())
        # The script's folder (python puts it first on sys.path): paths outside the working folder are shown
        # relative to it, so a script run from elsewhere does not fill the line table with absolute paths.
        self.script_dir = _folder(sys.path[0]) if sys.path and sys.path[0] else None
        self._files: dict[str, str | None] = {}  # co_filename -> path to show, or None when not user code
        self._names: dict[tuple[str, int], str] = {}  # (co_filename, line) -> annotation name

    def display(self, filename: str) -> str | None:
        """The path to show for a file of user code (relative to the working folder when inside it), else None."""
        if filename.startswith("<"):  # <stdin>, <string>, notebook cells are the user's; <frozen ...> is not
            return None if filename.startswith(("<frozen", "<built-in")) or self.roots else filename
        path = _folder(filename)[:-1]
        if path.startswith(_STEPSCOPE_DIR + os.sep):
            return None
        if self.libraries:
            if path.startswith(self.never):
                return None
            installed = installed_name(path)
            if installed is not None:
                return installed
        elif self.roots is not None:
            if not any(path.startswith(root) for root in self.roots):
                return None
        elif path.startswith(self.excluded) or "site-packages" in path or "dist-packages" in path:
            return None
        for base in (self.cwd, self.script_dir):
            if base and path.startswith(base):
                return path[len(base):]
        return path

    def user_frame(self, frame: FrameType | None) -> FrameType | None:
        """The first frame of user code from `frame` outwards."""
        files = self._files
        while frame is not None:
            filename = frame.f_code.co_filename
            shown = files.get(filename, _UNKNOWN)
            if shown is _UNKNOWN:
                shown = files[filename] = self.display(filename)
            if shown is not None:
                return frame
            frame = frame.f_back
        return None

    def annotation(self, frame: FrameType | None) -> str | None:
        """The line annotation for the first user frame from `frame` outwards; None when there is none."""
        frame = self.user_frame(frame)
        if frame is None:
            return None
        code = frame.f_code
        key = (code.co_filename, frame.f_lineno)
        name = self._names.get(key)
        if name is None:
            text = linecache.getline(code.co_filename, frame.f_lineno).strip()
            function = getattr(code, "co_qualname", code.co_name)
            name = self._names[key] = line_annotation(self._files[code.co_filename] or "", frame.f_lineno,
                                                      function, text)
        return name
