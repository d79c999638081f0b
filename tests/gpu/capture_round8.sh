#!/usr/bin/env bash
# Round 8: the event-matched calibration checked live on four jobs (plain windows, then stepscope run).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:/tmp/site:${PYTHONPATH:-}"
R=/tmp/r8; rm -rf $R; mkdir -p $R/plain $R/runs
pack() { (cd $R && tar czf - . | split -b 15m - $OUT/r8.part_); }
G=examples/gpt2_train.py
NANO="--n-layer 6 --n-embd 384 --n-head 6 --block-size 256 --batch-size 64 --vocab 65"
plain() { local name=$1; shift
  timeout 40 python3 tests/gpu/faithful_driver.py --out $R/plain/$name --optsets none --windows 3 --plain 15 -- "$@" > $R/plain/$name.log 2>&1
  echo "$name: $(grep -o '"plain_ms": \[[^]]*\]' $R/plain/$name.log)"; }
srun() { local name=$1; shift
  timeout 45 python3 -m stepscope run --out $R/runs/$name --width 100 "$@" > $R/runs/$name.log 2>&1
  rm -f $R/runs/$name/report.html $R/runs/$name/trace.json.gz
  python3 -c "import json;c=json.load(open('$R/runs/$name/calibration.json'));r=json.load(open('$R/runs/$name/report.json'))['run']['reference'];print('$name', round(c['op_ns']), round(c['launch_ns']), round(c['seconds'],1), r['step_us'])"; pack; }
nvidia-smi --query-gpu=name --format=csv,noheader
plain gpt2_b12 $G --steps 300
plain nano_b64 $G $NANO --steps 300
plain sync_bound examples/pattern_sync_bound.py --steps 300
pack
srun gpt2_b12 $G
srun nano_b64 $G $NANO
srun sync_bound examples/pattern_sync_bound.py
srun gpt2_b12_again $G
