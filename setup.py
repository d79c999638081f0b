"""The one thing pyproject.toml cannot say: the C extensions: the step meter's hooks
(src/stepscope/capture/meter/_native.c), the Kineto reader's column gathering (src/stepscope/trace/kineto/_gather.c)
and the replay's loop (src/stepscope/replay/_walk.c).

All are optional: where one does not build (no compiler, not Linux) the install still succeeds, the meter runs its
Python hooks (capture/meter/native.py), the reader builds its columns in Python (trace/kineto/gather.py) and the
replay loops in Python (replay/engine.py)."""

import sys

from setuptools import Extension, setup

extensions = []
if sys.platform.startswith("linux"):
    extensions.append(Extension("stepscope.capture.meter._native", ["src/stepscope/capture/meter/_native.c"],
                                extra_compile_args=["-O2"], optional=True))
    extensions.append(Extension("stepscope.replay._walk", ["src/stepscope/replay/_walk.c"],
                                extra_compile_args=["-O2", "-ffp-contract=off"], optional=True))
    extensions.append(Extension("stepscope.trace.kineto._gather", ["src/stepscope/trace/kineto/_gather.c"],
                                extra_compile_args=["-O2"], optional=True))

setup(ext_modules=extensions)
