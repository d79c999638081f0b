#!/usr/bin/env bash
# Round 1 on the device machine (H100): every example under `stepscope run` on CUDA, the known-matmul-line
# model, the cifar_resnet rungs (profiled and plain), NVML telemetry, and an Nsight Systems attempt.
# Run from the repo root with the carried wheels installed; results go to $OUT as tarballs.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:${PYTHONPATH:-}"
R=/tmp/r1; mkdir -p $R/runs $R/plain $R/nsys
log() { echo "== $(date +%T) $*"; }
ss() { name=$1; shift; log "stepscope run $name"; timeout 240 python3 -m stepscope run --out $R/runs/$name "$@" > $R/runs/$name.log 2>&1; echo "rc=$?" >> $R/runs/$name.log; tail -n 60 $R/runs/$name.log | grep -E "^(verdict|  [a-z_]+ |run:|GPU|stepscope:|rc=)|bound|%" | head -20; }
pack() { (cd $R && tar czf $OUT/$1.tgz ${@:2}) ; }

log probe
{ nvidia-smi; python3 -c "import torch,sys;print(sys.version);print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0))";
  python3 -c "import pynvml; pynvml.nvmlInit(); print('nvml', pynvml.nvmlSystemGetDriverVersion())";
  nproc; which nsys ncu; ls /opt/nvidia 2>&1; find / -xdev \( -name 'nsys' -o -name 'QdstrmImporter' \) -type f 2>/dev/null | head; } > $R/probe.txt 2>&1
cat $R/probe.txt | head -40

for ex in input_bound copy_bound sync_bound launch_bound cpu_compute_bound gpu_compute_bound; do
  ss $ex examples/pattern_$ex.py
done
ss input_bound_w8 examples/pattern_input_bound.py --workers 8
ss big_matmul --record-shapes --full tests/gpu/big_matmul.py --steps 14
pack patterns runs probe.txt

RUNGS=("" "--workers 8" "--workers 8 --pin-memory" "--workers 8 --pin-memory --batch-size 128"
  "--workers 8 --pin-memory --batch-size 128 --uint8" "--workers 8 --pin-memory --batch-size 128 --uint8 --set-to-none"
  "--workers 8 --pin-memory --batch-size 128 --uint8 --set-to-none --amp")
i=0
for flags in "${RUNGS[@]}"; do
  i=$((i+1)); log "plain rung $i: $flags"
  timeout 120 python3 examples/cifar_resnet.py --steps 60 $flags 2>&1 | tail -1 | tee $R/plain/rung$i.txt
  ss cifar_rung$i examples/cifar_resnet.py $flags
done
mkdir -p $R/cifar; mv $R/runs/cifar_* $R/cifar/ 2>/dev/null
pack cifar cifar plain

log nsys
NSYS=$(command -v nsys || find / -xdev -name nsys -type f 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
  ( cd $R/nsys && timeout 100 $NSYS profile -t cuda,nvtx,osrt -o sync python3 $OLDPWD/examples/pattern_sync_bound.py --steps 12 > nsys.log 2>&1; echo "rc=$?" >> nsys.log;
    ls -la >> nsys.log; for f in *.nsys-rep; do timeout 45 $NSYS export --type sqlite -o ${f%.nsys-rep}.sqlite $f >> nsys.log 2>&1; done; ls -la >> nsys.log )
  tail -20 $R/nsys/nsys.log
fi
pack misc nsys
log done
