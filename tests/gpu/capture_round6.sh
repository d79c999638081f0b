#!/usr/bin/env bash
# Round 6 (run on the other GPU kind than round 5; round 7 runs it again on an H100 with the fixed capture): the jobs of round 5 run plain (the ground truth on this GPU,
# for predict's validation from round 5's captures) and under `stepscope run` with the timing pass and the
# calibration (the live captures the replay is checked on). Everything lands in $OUT/r6.tgz as it goes.
set -u
# stepscope's own dependencies missing on the GPU image travel as wheels (.whl, carried; see the device README).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:/tmp/site:${PYTHONPATH:-}"
R=/tmp/${ROUND:-r6}; rm -rf $R; mkdir -p $R/plain $R/runs
T0=$(date +%s)
log() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
pack() { (cd $R && tar czf - . | split -b 15m - $OUT/${ROUND:-r6}.part_); }  # files come back under 16 MiB
plain() {  # NAME SCRIPT ARGS...: unprofiled windows in one process (faithful_driver, no profiler)
  local name=$1; shift
  timeout 60 python3 tests/gpu/faithful_driver.py --out $R/plain/$name --optsets none --windows 3 -- "$@" \
    > $R/plain/$name.log 2>&1
  echo "$name: $(grep -o '"plain_ms": \[[^]]*\]' $R/plain/$name.log)"
}
srun() {  # NAME ARGS...: stepscope run
  local name=$1; shift
  log "stepscope run $name"
  timeout 90 python3 -m stepscope run --out $R/runs/$name --width 100 "$@" > $R/runs/$name.log 2>&1
  echo "rc=$?" >> $R/runs/$name.log
  rm -f $R/runs/$name/report.html
  grep -E "BOUND|rc=|error" $R/runs/$name.log | head -3
  pack
}
{ python3 -c "import torch;print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"
  nvidia-smi --query-gpu=driver_version,name,power.limit,clocks.max.sm --format=csv,noheader; nproc; } > $R/versions.txt
cat $R/versions.txt
G=examples/gpt2_train.py
NANO="--n-layer 6 --n-embd 384 --n-head 6 --block-size 256 --batch-size 64 --vocab 65"
W=examples/walkthrough_resnet18.py
log plain
plain gpt2_b12 $G --steps 400
plain nano_b64 $G $NANO --steps 400
plain walk_w0 $W --steps 400
plain cifar_r1 examples/cifar_resnet.py --steps 300
plain copy_bound examples/pattern_copy_bound.py --steps 300
plain input_bound examples/pattern_input_bound.py --steps 300
plain launch_bound examples/pattern_launch_bound.py --steps 300
plain sync_bound examples/pattern_sync_bound.py --steps 300
plain gpu_compute examples/pattern_gpu_compute_bound.py --steps 300
pack
srun gpt2_b12 $G
srun nano_b64 $G $NANO
srun walk_w0 $W
srun cifar_r1 examples/cifar_resnet.py
srun copy_bound examples/pattern_copy_bound.py
srun input_bound examples/pattern_input_bound.py
srun launch_bound examples/pattern_launch_bound.py
srun sync_bound examples/pattern_sync_bound.py
srun gpu_compute examples/pattern_gpu_compute_bound.py
srun gpt2_b12_again $G
srun nano_b64_again $G $NANO
srun gpt2_b12_noattr --no-attribution $G
srun gpt2_b12_noshapes --no-record-shapes $G
srun gpt2_b12_nomemory --no-profile-memory $G
log overhead outside the window: the script\'s own ms/step, plain and under stepscope run --skip 1000000 --full
for i in 1 2; do
  echo "plain: $(timeout 60 python3 $G --steps 60 2>&1 | tail -1)"
  echo "hooked: $(timeout 60 python3 -m stepscope run --skip 1000000 --full --out $R/ovh$i $G --steps 60 2>&1 | grep gpt2_train | tail -1)"
  rm -rf $R/ovh$i
done | tee $R/overhead.txt
pack
log done
