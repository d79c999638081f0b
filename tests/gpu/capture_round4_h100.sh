#!/usr/bin/env bash
# Round 4, on the H100: `stepscope tune` on the walk-through example (the measured ladder for
# docs/case-study.md), and `stepscope run` of the examples with the overhead-corrected verdicts and the
# synchronized unprofiled reference.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:${PYTHONPATH:-}"
R=/tmp/r4; mkdir -p $R/runs
log() { echo "== $(date +%T) $*"; }
ss() { name=$1; shift; log "stepscope run $name"; timeout 70 python3 -m stepscope run --out $R/runs/$name "$@" > $R/runs/$name.log 2>&1; echo "rc=$?" >> $R/runs/$name.log; grep -E "BOUND|stepscope: (error|the)|rc=|profiler overhead|J per step" $R/runs/$name.log | head -6; }
log versions; { python3 -c "import torch;print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"; nvidia-smi --query-gpu=driver_version,name,power.limit,clocks.max.sm --format=csv,noheader; nproc; } | tee $R/versions.txt
log tune
timeout 235 python3 -m stepscope tune --budget 220s --allow-batch-change --width 140 \
  --fixes dataloader_workers,pin_memory,non_blocking_copy,set_to_none,amp,torch_compile,larger_batch,channels_last,cudnn_benchmark \
  --out $R/tune examples/cifar_resnet.py --steps 150 > $R/tune.log 2>&1; echo "tune rc=$?" | tee -a $R/tune.log
tail -40 $R/tune.log
ss sync_bound examples/pattern_sync_bound.py
ss gpu_compute_bound examples/pattern_gpu_compute_bound.py
ss cifar_rung1 examples/cifar_resnet.py
find $R -name "*.html" -delete
(cd $R && tar czf $OUT/h100_r4.tgz runs tune tune.log versions.txt)
log done
