#!/usr/bin/env bash
# The GPU check, one call of the device tool (benchmarks/gpu_check.py says what it runs and keeps).
# Prepare on this machine first (no device time): scripts/gpu-wheels   (msgspec and plotly for the device's Python
# 3.12 into .whl/, which .git/info/exclude ignores), then:
#   run(command="bash benchmarks/gpu_check.sh", carry=[".whl"], timeout_s=600)
# The results: the printed table, and $OUT/gpu_<gpu>_meter.tar.gz (unpack it in the repository: tests/data/...).
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "gpu_check: the wheels in .whl/ did not install (run scripts/gpu-wheels here first)"; exit 2; }
export PYTHONPATH="/tmp/site:$PWD/src" PYTHONUNBUFFERED=1
# The meter's hooks in C, built here where the device's Python has setuptools and a compiler (else its Python hooks).
python3 setup.py -q build_ext --inplace >/tmp/gpu_check_build.log 2>&1 || true
python3 -c "import time; from stepscope.capture.meter.native import native_hooks as n
print('gpu_check: the step meter runs its', 'C' if n(time.perf_counter_ns) else 'Python', 'hooks')" || true
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 benchmarks/gpu_check.py --budget "${GPU_CHECK_BUDGET:-540}" --out "${OUT:-/tmp/gpu_check_out}"
