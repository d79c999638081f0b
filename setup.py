"""The one thing pyproject.toml cannot say: the C extensions, the step meter's hooks
(src/stepscope/capture/meter/_native.c) and the Kineto reader's column gathering (src/stepscope/trace/kineto/_gather.c).

Both are optional: where one does not build (no compiler, not Linux) the install still succeeds, the meter runs its
Python hooks (capture/meter/native.py) and the reader builds its columns in Python (trace/kineto/gather.py)."""

import sys

from setuptools import Extension, setup

extensions = []
if sys.platform.startswith("linux"):
    extensions.append(Extension("stepscope.capture.meter._native", ["src/stepscope/capture/meter/_native.c"],
                                extra_compile_args=["-O2"], optional=True))
    extensions.append(Extension("stepscope.trace.kineto._gather", ["src/stepscope/trace/kineto/_gather.c"],
                                extra_compile_args=["-O2"], optional=True))

setup(ext_modules=extensions)
