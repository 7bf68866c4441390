#!/usr/bin/env bash
# cluster_iteration.sh — the engine-level half of compress_bench: a ZeRO-3
# iteration (step_bench --compress: exact against int4 gradients with LoCo
# error feedback + int8 weights, steps alternating, best of STEPS) on two
# emulated nodes of one rank each (tests/cluster/cluster.sh; needs root and
# network namespaces) at each link rate given, then the crossover: each
# variant's best step fitted as t(B) = a + b / B over the two lowest rates
# (compute plus bytes over the link), and the rate where the two lines meet.
#
#   bash bench/compress_bench/cluster_iteration.sh [BUILD] [RATES...]
#       BUILD: the build directory (build/cpu); RATES: tc rates in Mbit/s
#       (default 1000 2500 10000; the unshaped veth link of the 2-core VM
#       carries about 6 Gbit/s, so 10000 means "as fast as it goes")
# Environment: PARAMS (16777216), MODULES (16), STEPS (3), DTYPE (f32),
# CODEC (int4: qgZ int4 with LoCo; terngrad: TernGrad gradients, no error
# feedback; step_bench --compress-codec), both with int8 weights.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build/cpu}
shift || true
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(1000 2500 10000)
bench=$build/bench/step_bench/step_bench
[ -x "$bench" ] || { echo "cluster_iteration: $bench not built"; exit 2; }
cluster=$here/tests/cluster/cluster.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
name=cxbench
trap '"$cluster" down --name $name > /dev/null 2>&1 || true' EXIT
out=$(mktemp)
for r in "${rates[@]}"; do
  "$cluster" down --name $name > /dev/null 2>&1 || true
  "$cluster" up 2 --ppn 1 --rate "${r}mbit" --name $name > /dev/null
  echo "== link ${r} Mbit/s"
  "$cluster" run --name $name -- -n 2 --mca mpi_yield_when_idle 1 "$bench" \
      --params "${PARAMS:-16777216}" --modules "${MODULES:-16}" --steps "${STEPS:-3}" \
      --dtype "${DTYPE:-f32}" --compress --compress-codec "${CODEC:-int4}" | tee /dev/stderr | \
    awk -v r="$r" '/^exact / { e = $2 } /^qgZ (int4|terngrad) / { c = $6 } END { print r, e, c }' >> "$out"
done 2>&1
"$cluster" down --name $name > /dev/null 2>&1 || true
echo
echo "link Mbit/s   exact s   compressed s   speed-up"
awk '{ printf "%10d %9.3f %14.3f %9.2fx\n", $1, $2, $3, $2 / $3 }' "$out"
sort -n "$out" | head -n 2 | awk '
  NR == 1 { b1 = $1 / 1000; e1 = $2; c1 = $3 } NR == 2 { b2 = $1 / 1000; e2 = $2; c2 = $3 }
  END { if (NR < 2) exit
        # t = a + k / B through the two points, for each variant
        ke = (e1 - e2) / (1 / b1 - 1 / b2); ae = e1 - ke / b1
        kc = (c1 - c2) / (1 / b1 - 1 / b2); ac = c1 - kc / b1
        printf "fit: exact %.3f s + %.3f Gbit / B, compressed %.3f s + %.3f Gbit / B\n", ae, ke, ac, kc
        if (ac > ae && ke > kc)
          printf "crossover: compression pays below %.1f Gbit/s per rank\n", (ke - kc) / (ac - ae)
        else
          printf "crossover: compression pays at every rate of the fit\n" }'
rm -f "$out"
