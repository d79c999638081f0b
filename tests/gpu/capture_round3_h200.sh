#!/usr/bin/env bash
# Round 3, on the H200: the same workloads as round 2's H100 fixtures (for cross-GPU prediction), the bf16
# workloads for MFU (big matmul, transformer block), and the achievable GEMM/copy figures.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:${PYTHONPATH:-}"
R=/tmp/r3; mkdir -p $R/runs
log() { echo "== $(date +%T) $*"; }
ss() { name=$1; shift; log "stepscope run $name"; timeout 200 python3 -m stepscope run --out $R/runs/$name "$@" > $R/runs/$name.log 2>&1; echo "rc=$?" >> $R/runs/$name.log; grep -E "^│ [A-Z].*BOUND|stepscope: (error|the)|rc=|max_memory|step time" $R/runs/$name.log | head -5; }
log versions; { python3 -c "import torch;print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"; nvidia-smi --query-gpu=driver_version,name,power.limit,clocks.max.sm --format=csv,noheader; nproc; } | tee $R/versions.txt
python3 -m stepscope.hardware.measure --json $R/achievable.json
for ex in input_bound copy_bound launch_bound gpu_compute_bound; do ss $ex examples/pattern_$ex.py; done
A="--workers 8"; B="$A --pin-memory"; C="$B --batch-size 128"; D="$C --uint8 --set-to-none --amp"
ss cifar_rung1 examples/cifar_resnet.py; ss cifar_rung3 examples/cifar_resnet.py $B; ss cifar_rung4 examples/cifar_resnet.py $C; ss cifar_rung7 examples/cifar_resnet.py $D
ss big_matmul --record-shapes --full tests/gpu/big_matmul.py --steps 14
ss big_matmul_bf16 --record-shapes --full tests/gpu/big_matmul.py --steps 14 --dtype bfloat16 --width 16384 --batch-size 8192
ss transformer_block --record-shapes --full tests/gpu/transformer_block.py --steps 14
(cd $R && tar czf $OUT/h200.tgz runs versions.txt achievable.json)
log done
