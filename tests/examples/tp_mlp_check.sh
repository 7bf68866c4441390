#!/usr/bin/env bash
# The tensor-parallel example (model_parallel_size 2 x data-parallel 2 on 4
# ranks) trained with activation checkpointing and recomputation — also
# with cpu_checkpointing and contiguous memory — must end with weights
# bitwise identical to the run that keeps every activation.
# usage: tp_mlp_check.sh TP_MLP MPIEXEC OUTDIR
set -euo pipefail
bin=$1 mpiexec=$2 out=$3
mkdir -p "$out"
run() { "$mpiexec" -n 4 --oversubscribe "$bin" --mp 2 --stage "$1" --steps 12 --export "$out/$2" "${@:3}"; }
for stage in 1 3; do
  run $stage plain_s$stage >/dev/null
  for variant in "--checkpoint" "--checkpoint --cpu-checkpointing" "--checkpoint --contiguous"; do
    name=ck_s${stage}_$(echo "$variant" | tr -d ' -')
    run $stage "$name" $variant | tail -1
    for r in 0 1; do
      cmp "$out/plain_s$stage.mp$r" "$out/$name.mp$r" || {
        echo "FAIL: stage $stage $variant differs from the run without checkpointing (mp rank $r)"; exit 1; }
    done
  done
done
rm -rf "$out"
echo "activation checkpointing: bitwise identical to no checkpointing at stages 1 and 3 (mp 2 x dp 2)"
