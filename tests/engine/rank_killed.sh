#!/usr/bin/env bash
# A rank killed mid-step: the survivors must fail with ZINC_ERR_COMM naming
# it within comm_timeout_s (4 s) plus a margin, not hang.
# usage: rank_killed.sh BIN MPIEXEC NP STAGE
set -uo pipefail
bin=$1 mpiexec=$2 np=$3 stage=$4
victim=$((np - 1))
start=$(date +%s)
out=$(timeout 60 "$mpiexec" -n "$np" --oversubscribe --enable-recovery "$bin" "$stage" 2>&1)
took=$(( $(date +%s) - start ))
echo "$out" | grep survivor
ok=$(echo "$out" | grep -c "survivor .*: ZINC_ERR_COMM after [0-9.]* s: .*rank(s) $victim\|survivor .*: ZINC_ERR_COMM after [0-9.]* s: .*rank $victim")
if [ "$ok" -ne $((np - 1)) ]; then
  echo "$out"; echo "FAIL: $ok of $((np - 1)) survivors reported ZINC_ERR_COMM naming rank $victim"; exit 1
fi
if [ "$took" -gt 30 ]; then
  echo "FAIL: the run took $took s (timeout 4 s)"; exit 1
fi
echo "PASS: $((np - 1)) survivors failed with ZINC_ERR_COMM naming rank $victim in $took s"
