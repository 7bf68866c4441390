#!/usr/bin/env bash
# scripts/gpu_check.sh --dry-run: the script runs here (no GPU), writes one
# report with every section of the first-GPU-run sequence, and decides the
# skips from the GPU count: with --gpus 0 every GPU step is SKIPPED and the
# report says so; with --gpus 2 the 1- and 2-rank runs would run and the 4-
# and 8-rank ones are SKIPPED naming the count they need.
# usage: gpu_check_dry_run.sh SOURCE_DIR WORK_DIR
set -uo pipefail
src=$1 work=$2
rm -rf "$work"; mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

for g in 0 2; do
  r=$work/report_gpus$g.md
  "$src/scripts/gpu_check.sh" --dry-run --gpus $g --report "$r" >"$work/stdout_gpus$g" 2>&1
  rc=$?
  [ $rc = 0 ] || { cat "$work/stdout_gpus$g"; fail "gpu_check.sh --dry-run --gpus $g exited $rc"; }
  [ -s "$r" ] || fail "no report at $r"
  n=1
  for s in "Environment" "Build" "CUDA error test" "Kernel tests under compute-sanitizer memcheck" \
           "Reductions under racecheck and synccheck" "Caching pools" "adam_bench --device cuda" \
           "NCCL comm at 1/2/4/8 ranks" "Stages oracle on GPUs" \
           "examples/mlp on the GPU against the CPU build" "A rank killed mid-step" \
           "ctest -L gpu (every other GPU test)"; do
    grep -qxF "## $n. $s" "$r" || fail "report (--gpus $g) lacks section '## $n. $s' in its place"
    n=$((n + 1))
  done
  grep -qx '## Summary' "$r" || fail "report (--gpus $g) has no summary"
  for w in "GPU count | $g" "driver |" "CUDA toolkit (nvcc)" "NCCL (header)" "compute-sanitizer |"; do
    grep -qF "$w" "$r" || fail "environment table (--gpus $g) lacks '$w'"
  done
  for t in test_cuda_adam test_cuda_sumsq test_cuda_pool test_comm_nccl_np1 test_gpu_stages_np8 \
           zero3_offload_nvme.json "SIGKILL\|killed"; do
    grep -q "^| [A-Z ]* | [a-z]* | .*$t" "$r" || fail "summary (--gpus $g) has no row for $t"
  done
  grep -q '^| FAIL |' "$r" && fail "a FAIL in a dry run (--gpus $g)"
done

r=$work/report_gpus0.md
grep -q 'NO GPU: every GPU step was SKIPPED' "$r" || fail "--gpus 0: the result line does not say NO GPU"
! grep -E '^\| [A-Z ]+ \| (memcheck|racecheck|synccheck|pool|adam|nccl|stages|mlp|kill|ctest) \|' "$r" |
  grep -qv '^| SKIPPED |' || fail "--gpus 0: a GPU step is not SKIPPED"
grep -q '^| SKIPPED | synccheck | test_cuda_codec (synccheck) | no GPU' "$r" ||
  fail "--gpus 0: no synccheck row for the codec"

r=$work/report_gpus2.md
for np in 1 2; do
  grep -q "^| WOULD RUN | nccl | test_comm_nccl_np$np |" "$r" || fail "--gpus 2: np$np not run"
done
for np in 4 8; do
  grep -q "^| SKIPPED | stages | test_gpu_stages_np$np | needs $np GPUs (one per rank), this machine has 2 |" "$r" ||
    fail "--gpus 2: test_gpu_stages_np$np not SKIPPED naming 'needs $np GPUs'"
done
grep -q '^| WOULD RUN | kill |' "$r" || fail "--gpus 2: the rank kill would not run"
grep -q 'compute-sanitizer --tool racecheck' "$r" || fail "--gpus 2: no racecheck command in the report"
echo "PASS: both dry-run reports have every section and the right skip decisions"
