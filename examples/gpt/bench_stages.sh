#!/usr/bin/env bash
# bench_stages.sh — tokens/s of the GPT example at every ZeRO stage and
# offload target, for one fixed model and rank count, each as a ratio to
# stage 0 measured in the same run (the peer it should be compared with:
# same model, same data, same machine, same minute).
#
#   examples/gpt/bench_stages.sh [build dir] [ranks] [steps] [gpt_train flags...]
#   e.g. examples/gpt/bench_stages.sh build/cpu 2 100 --width 128 --layers 2
#   (ROUNDS=n: best of n interleaved rounds per config, default 2)
#
# tokens/s is gpt_train's own figure: global tokens per step over the wall
# time of every step but the first. Run it on an otherwise idle machine.
# MPIEXEC overrides the launcher (default mpirun).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/cpu}; ranks=${2:-2}; steps=${3:-100}
shift $(( $# < 3 ? $# : 3 ))
train=$build/examples/gpt/gpt_train
[ -x "$train" ] || { echo "no $train: build the tree first (needs the engine)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
work=$(mktemp -d /tmp/zinc_bench_stages.XXXXXX)
trap 'rm -rf "$work"' EXIT

configs=(zero0 zero1 zero2 zero3 zero2_offload_cpu zero3_offload_cpu zero3_offload_nvme)
rounds=${ROUNDS:-2}
printf "gpt_train, %d ranks, %d steps, best of %d rounds, flags: %s\n" "$ranks" "$steps" \
  "$rounds" "${*:-(defaults)}"
declare -A best
for round in $(seq "$rounds"); do # interleaved, so a busy minute hits every config
  for c in "${configs[@]}"; do
    mkdir -p "$work/nvme"
    sed "s|/tmp/zinc_nvme|$work/nvme|g" "examples/configs/$c.json" > "$work/$c.json"
    if ! "${MPIEXEC:-mpirun}" -n "$ranks" --oversubscribe "$train" --config "$work/$c.json" \
         --steps "$steps" --sample 0 "$@" > "$work/$c.out" 2>&1; then
      echo "$c failed (round $round):"
      tail -n 5 "$work/$c.out" | sed 's/^/    /'
      continue
    fi
    tps=$(sed -n 's/^trained steps .*: \([0-9.]*\) tokens\/s.*/\1/p' "$work/$c.out")
    best[$c]=$(awk -v a="${best[$c]:-0}" -v b="$tps" 'BEGIN { print (b > a ? b : a) }')
  done
done
printf "%-20s %12s %14s\n" config tokens/s "vs stage 0"
base=${best[zero0]:-}
for c in "${configs[@]}"; do
  [ -n "${best[$c]:-}" ] || { printf "%-20s %12s\n" "$c" failed; continue; }
  awk -v c="$c" -v t="${best[$c]}" -v b="$base" 'BEGIN {
    if (b == "") printf "%-20s %12.0f %14s\n", c, t, "(no stage 0)"
    else printf "%-20s %12.0f %13.2fx\n", c, t, t / b }'
done
