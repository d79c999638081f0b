"""The one thing pyproject.toml cannot say: the step meter's hooks in C (src/stepscope/capture/meter/_native.c).

The extension is optional: where it does not build (no compiler, not Linux) the install still succeeds and the
meter runs its Python hooks (capture/meter/native.py)."""

import sys

from setuptools import Extension, setup

extensions = []
if sys.platform.startswith("linux"):
    extensions.append(Extension("stepscope.capture.meter._native", ["src/stepscope/capture/meter/_native.c"],
                                extra_compile_args=["-O2"], optional=True))

setup(ext_modules=extensions)
