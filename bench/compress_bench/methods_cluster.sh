#!/usr/bin/env bash
# methods_cluster.sh — every gradient-compression method of step_bench on
# two emulated nodes of one rank each (tests/cluster/cluster.sh; needs root
# and network namespaces) at each link rate: the method's best step against
# the exact run in the same process (steps alternating), and the bytes rank
# 0 sent per step from the comms logger against the exact run's.
#
#   bash bench/compress_bench/methods_cluster.sh [BUILD] [RATES...]
#       BUILD: the build directory (build/cpu); RATES: tc rates in Mbit/s
#       (default 10000 1000)
# Environment: PARAMS (16777216), MODULES (16), STEPS (3), and METHODS: the
# step_bench flags of each method, separated by ';' (default: every method
# step_bench knows).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build/cpu}
shift || true
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(10000 1000)
bench=$build/bench/step_bench/step_bench
[ -x "$bench" ] || { echo "methods_cluster: $bench not built"; exit 2; }
default_methods="--compress;--compress --compress-codec terngrad;--dgc 0.01"
for flag in --onebit --zoadam "--powersgd 4" "--dga 2"; do
  "$bench" --help 2>&1 | grep -q -- "${flag%% *}" && default_methods="$default_methods;$flag"
done
IFS=';' read -r -a methods <<< "${METHODS:-$default_methods}"
cluster=$here/tests/cluster/cluster.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
name=mxbench
trap '"$cluster" down --name $name > /dev/null 2>&1 || true' EXIT
out=$(mktemp)
for r in "${rates[@]}"; do
  "$cluster" down --name $name > /dev/null 2>&1 || true
  "$cluster" up 2 --ppn 1 --rate "${r}mbit" --name $name > /dev/null
  for m in "${methods[@]}"; do
    # shellcheck disable=SC2086
    "$cluster" run --name $name -- -n 2 --mca mpi_yield_when_idle 1 "$bench" \
        --params "${PARAMS:-16777216}" --modules "${MODULES:-16}" --steps "${STEPS:-3}" $m |
      awk -v r="$r" -v m="$m" '
        / step [0-9.]+ s vs [0-9.]+ s without/ { for (i = 1; i <= NF; i++) if ($i == "step") { c = $(i + 1); e = $(i + 4) } }
        / sent [0-9.]+ MB per step vs/ { for (i = 1; i <= NF; i++) if ($i == "sent") { cb = $(i + 1); eb = $(i + 6) } }
        END { printf "%s\t%s\t%s\t%s\t%s\t%s\n", r, m, e, c, eb, cb }' >> "$out"
  done
done
"$cluster" down --name $name > /dev/null 2>&1 || true
printf '%-10s %-36s %9s %9s %8s %11s %11s %8s\n' "Mbit/s" "method (step_bench flags)" "exact s" \
  "method s" "speed-up" "exact MB" "method MB" "bytes /"
awk -F'\t' '{ printf "%-10s %-36s %9.3f %9.3f %7.2fx %11.2f %11.2f %7.1fx\n", $1, $2, $3, $4,
              ($4 > 0 ? $3 / $4 : 0), $5, $6, ($6 > 0 ? $5 / $6 : 0) }' "$out"
rm -f "$out"
