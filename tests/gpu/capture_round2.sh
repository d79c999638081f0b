#!/usr/bin/env bash
# Round 2 on the device machine: the fixtures. Every example under `stepscope run` on CUDA (after the
# trace-name fix), the known-matmul-line model with shapes, plain timings of each example with and
# without its fix, the cifar_resnet ladder (profiled and plain, compile included), an nsys attempt.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:${PYTHONPATH:-}"
R=/tmp/r2; mkdir -p $R/runs $R/plain $R/nsys $R/cifar
log() { echo "== $(date +%T) $*"; }
ss() { dir=$1; name=$2; shift 2; log "stepscope run $name"; timeout 240 python3 -m stepscope run --out $R/$dir/$name "$@" > $R/$dir/$name.log 2>&1; echo "rc=$?" >> $R/$dir/$name.log; grep -E "^│ [A-Z].*BOUND|stepscope: (error|the)|rc=|J over" $R/$dir/$name.log | head -5; }
plain() { name=$1; shift; timeout 200 python3 "$@" 2>&1 | tail -1 | tee $R/plain/$name.txt; }
pack() { (cd $R && tar czf $OUT/$1.tgz ${@:2}) ; }

log versions; { python3 -c "import torch;print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"; nvidia-smi --query-gpu=driver_version,name --format=csv,noheader; } | tee $R/versions.txt
for ex in input_bound copy_bound sync_bound launch_bound cpu_compute_bound gpu_compute_bound; do
  ss runs $ex examples/pattern_$ex.py
done
ss runs big_matmul --record-shapes --full tests/gpu/big_matmul.py --steps 14
grep max_memory $R/runs/big_matmul.log
pack patterns runs versions.txt

log plain timings, each example with and without its fix
plain input_bound examples/pattern_input_bound.py --steps 30
plain input_bound_fix examples/pattern_input_bound.py --steps 30 --workers 8
plain copy_bound examples/pattern_copy_bound.py --steps 30
plain copy_bound_fix examples/pattern_copy_bound.py --steps 30 --pin-memory --uint8
plain sync_bound examples/pattern_sync_bound.py --steps 30
plain sync_bound_fix examples/pattern_sync_bound.py --steps 30 --no-sync
plain launch_bound examples/pattern_launch_bound.py --steps 30
plain cpu_compute_bound examples/pattern_cpu_compute_bound.py --steps 30
plain cpu_compute_bound_fix examples/pattern_cpu_compute_bound.py --steps 30 --on-device
plain gpu_compute_bound examples/pattern_gpu_compute_bound.py --steps 30
plain gpu_compute_bound_tf32 examples/pattern_gpu_compute_bound.py --steps 30 --tf32

A="--workers 8"; B="$A --pin-memory"; C="$B --batch-size 128"; D="$C --uint8"; E="$D --set-to-none"; F="$E --amp"; G="$F --compile"
i=0
for flags in "" "$A" "$B" "$C" "$D" "$E" "$F" "$G"; do
  i=$((i+1)); log "rung $i: $flags"
  plain rung$i examples/cifar_resnet.py --steps 80 $flags
  [ $i -lt 8 ] && ss cifar rung$i examples/cifar_resnet.py $flags
done
pack cifar cifar plain

log nsys
NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys; IMP=/opt/nvidia/nsight-compute/2025.3.1/host/linux-desktop-glibc_2_11_3-x64/QdstrmImporter
( cd $R/nsys && timeout 60 $NSYS profile -t cuda,nvtx --sample=none --cpuctxsw=none -o sync python3 $OLDPWD/examples/pattern_sync_bound.py --steps 12 > nsys.log 2>&1; echo "profile rc=$?" >> nsys.log
  ls -la >> nsys.log; q=$(ls *.qdstrm /tmp/nsys-report-*.qdstrm 2>/dev/null | head -1); echo "qdstrm: $q" >> nsys.log
  [ -n "$q" ] && { timeout 45 $IMP -i $q >> nsys.log 2>&1; echo "import rc=$?" >> nsys.log; }
  ls -la . /tmp/*.nsys-rep 2>/dev/null >> nsys.log; r=$(ls *.nsys-rep /tmp/*.nsys-rep 2>/dev/null | head -1)
  [ -n "$r" ] && { timeout 45 $NSYS export --type sqlite -o sync.sqlite $r >> nsys.log 2>&1; echo "export rc=$?" >> nsys.log; }
  rm -f *.qdstrm; ls -la >> nsys.log )
tail -25 $R/nsys/nsys.log
pack misc nsys
log done
