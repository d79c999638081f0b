#!/usr/bin/env bash
# Round 5: ground truth for the replay (issue 21) and the estimates (issues 22-23), on one GPU machine.
# Per job, tests/gpu/faithful_driver.py records unprofiled windows, one profiled window per option set and
# the profiler's cost per event, in one process; the perturbations run the script plain (its own
# throughput line). The walk-through's seven steps by hand close the run. Everything lands in $OUT/r5.tgz.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:${PYTHONPATH:-}"
R=/tmp/r5; rm -rf $R; mkdir -p $R
ONLY_DRIVE=${ONLY_DRIVE:-0}
T0=$(date +%s)
log() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
pack() { (cd $R && tar czf $OUT/r5${ONLY_DRIVE}.tgz .); }
drive() {  # NAME TIMEOUT OPTSETS SCRIPT ARGS...
  local name=$1 limit=$2 optsets=$3; shift 3
  log "drive $name"
  timeout $limit python3 tests/gpu/faithful_driver.py --out $R/$name --optsets $optsets -- "$@" \
    > $R/$name.log 2>&1; echo "rc=$?" >> $R/$name.log
  grep -E '^\{|rc=|Error' $R/$name.log | cut -c1-400; pack
}
plain() {  # NAME TIMEOUT SCRIPT ARGS...: the script's own last line
  [ "$ONLY_DRIVE" = 1 ] && return
  local name=$1 limit=$2; shift 2
  echo "$name: $(timeout $limit python3 "$@" 2>&1 | grep -v USDT | tail -1)" | tee -a $R/plain_runs.txt
}
{ python3 -c "import torch;print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"
  nvidia-smi --query-gpu=driver_version,name,power.limit,clocks.max.sm --format=csv,noheader; nproc; } > $R/versions.txt
cat $R/versions.txt
G=examples/gpt2_train.py
NANO="--n-layer 6 --n-embd 384 --n-head 6 --block-size 256 --batch-size 64 --vocab 65"
drive gpt2_b12 150 default,no_shapes,no_memory,minimal $G --steps 400
plain gpt2_b12 60 $G --steps 40
plain gpt2_b24 60 $G --steps 40 --batch-size 24
plain gpt2_b12_graph 60 $G --steps 60 --cuda-graph
drive nano_b64 120 default,no_shapes,no_memory,minimal $G $NANO --steps 400
plain nano_b64 60 $G $NANO --steps 100
plain nano_b128 60 $G ${NANO/64 --vocab/128 --vocab} --steps 100
plain nano_b64_graph 60 $G $NANO --steps 100 --cuda-graph
W=examples/walkthrough_resnet18.py
drive walk_w0 120 default,minimal $W --steps 400
plain walk_r1 60 $W --steps 80
plain walk_r2 60 $W --steps 150 --workers 8
plain walk_r3 60 $W --steps 150 --workers 8 --pin-memory
plain walk_r4 60 $W --steps 100 --workers 8 --pin-memory --batch-size 256
plain walk_r5 60 $W --steps 100 --workers 8 --pin-memory --batch-size 256 --uint8
plain walk_r6 60 $W --steps 100 --workers 8 --pin-memory --batch-size 256 --uint8 --set-to-none
plain walk_r7 60 $W --steps 100 --workers 8 --pin-memory --batch-size 256 --uint8 --set-to-none --amp
pack
drive copy_bound 60 default examples/pattern_copy_bound.py --steps 300
plain copy_bound_pinned 40 examples/pattern_copy_bound.py --steps 60 --pin-memory
plain copy_bound 40 examples/pattern_copy_bound.py --steps 60
drive cifar_r1 90 default examples/cifar_resnet.py --steps 300
plain cifar_r1_w8 40 examples/cifar_resnet.py --steps 100 --workers 8
plain cifar_r1 40 examples/cifar_resnet.py --steps 60
drive launch_bound 60 default examples/pattern_launch_bound.py --steps 300
plain launch_bound 40 examples/pattern_launch_bound.py --steps 40
plain launch_bound_b8 40 examples/pattern_launch_bound.py --steps 40 --batch-size 8
drive sync_bound 60 default examples/pattern_sync_bound.py --steps 300
plain sync_bound_nosync 40 examples/pattern_sync_bound.py --steps 60 --no-sync
drive gpu_compute 60 default examples/pattern_gpu_compute_bound.py --steps 300
plain gpu_compute_b2048 40 examples/pattern_gpu_compute_bound.py --steps 40 --batch-size 2048
drive input_bound 60 default examples/pattern_input_bound.py --steps 300
plain input_bound_w8 40 examples/pattern_input_bound.py --steps 100 --workers 8
pack
log done
