#!/usr/bin/env bash
# bench/infinity_demo at a tiny size (0.3 GiB of optimizer state, 26
# layers of 1024 x 1024): it trains 3 steps at stage 3 with parameters and
# optimizer state on NVMe; the printed loss must fall at every step, the
# peak RSS must stay within the host-memory forecast (the state is on disk,
# not in memory: here well under the state's size), the state on disk must
# be the optimizer state's and gradients' size, and the swap files must be gone at exit.
# A size the disk cannot hold, or whose gradient partition and buffers
# would crowd the memory, is refused with the bytes needed and available.
# usage: infinity_demo_check.sh DEMO WORK_DIR
set -uo pipefail
demo=$1 work=$2
rm -rf "$work"; mkdir -p "$work"
fail() { echo "$out"; echo "FAIL: $*"; exit 1; }

out=$("$demo" --state-gib 0.3 --width 1024 --steps 3 --dir "$work/swap" 2>&1)
rc=$?
[ $rc = 0 ] || fail "infinity_demo exited $rc"
losses=$(echo "$out" | sed -n 's/^step [0-9]*: loss \([0-9.]*\) .*/\1/p')
[ "$(echo "$losses" | wc -l)" = 3 ] || fail "expected 3 'step N: loss' lines"
echo "$losses" | awk 'NR > 1 && !($1 < prev) {bad = 1} {prev = $1} END {exit bad}' ||
  fail "the loss did not fall at every step: $(echo $losses)"
# the first loss of identity weights on +-1 inputs and targets: half the
# outputs are off by 2, so mean((y - t)^2 / 2) is about 1
echo "$losses" | head -1 | awk '{exit !($1 > 0.8 && $1 < 1.2)}' || fail "first loss not ~1"
read -r rss forecast < <(echo "$out" |
  sed -n 's/^peak RSS \([0-9.]*\) GiB .*forecast \([0-9.]*\) GiB.*/\1 \2/p')
[ -n "${rss:-}" ] || fail "no 'peak RSS ... forecast' line"
# (AddressSanitizer's shadow memory and quarantine inflate the RSS: there
# the demo's own check, the growth over its start, is the bound)
if [ -z "${ASAN_OPTIONS:-}" ]; then
  awk -v r="$rss" -v f="$forecast" 'BEGIN {exit !(r <= f && r < 0.3 * 0.9)}' ||
    fail "peak RSS $rss GiB beyond the forecast $forecast GiB or near the 0.3 GiB state"
fi
disk=$(echo "$out" | sed -n 's/^summary: .*state on disk: \([0-9]*\) bytes.*/\1/p')
# 12 B + 4 B + 2 B per parameter (27262976): the sub-groups of 1024 x 1024
# elements take 13 whole blocks of 1 MiB (1 MiB - 4 KiB payload) for the
# state (12 MiB) and 5 for the f32 gradients (4 MiB)
awk -v d="${disk:-0}" 'BEGIN {want = 27262976 * 19; exit !(d >= want && d < want * 1.1)}' ||
  fail "state on disk ${disk:-?} bytes, expected ~$((27262976 * 19))"
[ -z "$(find "$work/swap" -type f 2>/dev/null)" ] || fail "swap files left in $work/swap"

out=$("$demo" --state-gib 1000000 --dir "$work/swap" 2>&1)
rc=$?
[ $rc = 77 ] || fail "an impossible size exited $rc, not 77"
echo "$out" | grep -qE 'refused: the swap files need [0-9]+ bytes .* has [0-9]+ bytes .* available' ||
  fail "no refusal naming the disk bytes needed and available"
out=$("$demo" --state-gib 0.3 --width 1024 --max-host-frac 0.0001 --dir "$work/swap" 2>&1)
rc=$?
[ $rc = 77 ] || fail "a size beyond --max-host-frac exited $rc, not 77"
echo "$out" | grep -qE 'refused: the engine would hold [0-9]+ bytes .* MemAvailable [0-9]+ bytes' ||
  fail "no refusal naming the host bytes needed and available"
echo "PASS: loss $(echo $losses | tr ' ' '>') , peak RSS $rss GiB <= forecast $forecast GiB, $disk bytes on disk, removed; sizes beyond the disk and the memory refused"
