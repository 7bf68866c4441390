#!/usr/bin/env bash
# A rank killed (SIGKILL) or frozen (SIGSTOP) mid-step: every survivor must
# fail with ZINC_ERR_COMM naming it and the collective that missed it
# within comm_timeout_s (4 s) plus a margin, a later call must still name
# it, zinc_engine_destroy must return at once (within half the comm
# timeout: no comm the engine owns waits for the lost rank again) and the
# process must exit (through zinc's exit handler, which skips MPI_Finalize
# after a comm failure), all within comm_timeout_s + 5 s of the kill.
# usage: rank_killed.sh BIN MPIEXEC NP STAGE OVERLAP kill|stop [VARIANT [WHEN]]
# (VARIANT and WHEN: test_rank_killed.c; BIN gets STAGE OVERLAP SIGNAL and
# the rest, which tests/pipe/test_pp_killed.c reads as PP WORLD SIGNAL WHEN)
# Environment: RANK_KILLED_VICTIM, the world rank lost (default NP - 1);
# RANK_KILLED_OP, an extended regex for the operation the survivors' first
# failure must name (default: a collective's name).
set -uo pipefail
bin=$1 mpiexec=$2 np=$3 stage=$4 overlap=$5 signal=$6
shift 6
victim=${RANK_KILLED_VICTIM:-$((np - 1))} survivors=$((np - 1))
export RANK_KILLED_VICTIM=$victim
timeout_s=4 limit=9 destroy_limit=2 # comm_timeout_s in test_rank_killed.c, the allowances
log=$(mktemp)
RANK_KILLED_NVME_DIR=$(mktemp -d -p "${ZINC_TEST_BINARY_DIR:-/tmp}" rank_killed_nvme.XXXXXX)
export RANK_KILLED_NVME_DIR
trap 'rm -rf "$log" "$RANK_KILLED_NVME_DIR"' EXIT

timeout 60 "$mpiexec" -n "$np" --oversubscribe --enable-recovery "$bin" "$stage" "$overlap" \
  "$signal" "$@" >"$log" 2>&1 &
launcher=$!
if [ "$signal" = stop ]; then
  # The frozen victim never leaves by itself: once every survivor has
  # exited (or after 40 s), kill it so that mpirun can finish.
  for _ in $(seq 400); do
    [ "$(grep -c '^survivor .*: exited after' "$log")" -ge "$survivors" ] && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.1
  done
  pid=$(sed -n 's/^victim [0-9]*: pid \([0-9]*\) stopping$/\1/p' "$log" | head -1)
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
fi
wait "$launcher"
out=$(cat "$log")
echo "$out" | grep -E '^(survivor|victim)'

fail() { echo "$out"; echo "FAIL: $*"; exit 1; }
if echo "$out" | grep -qE 'ERROR: (Address|Leak|Undefined|Thread)Sanitizer|runtime error:'; then
  fail "a sanitizer reported an error"
fi
names_victim="(rank\(s\) ([0-9]+,)*$victim(,|[^0-9,]|$)|rank $victim([^0-9]|$))"
# the collective that missed the victim, by its name in comm/comm.c
names_op=${RANK_KILLED_OP:-"(all-reduce|reduce-scatter|all-gatherv?|broadcast|all-to-all-v|: barrier)"}
count() { echo "$out" | grep -cE "$1"; }
n=$(count "^survivor [0-9]+: ZINC_ERR_COMM after [0-9.]+ s: .*$names_victim")
[ "$n" -eq "$survivors" ] || fail "$n of $survivors survivors reported ZINC_ERR_COMM naming rank $victim"
n=$(count "^survivor [0-9]+: ZINC_ERR_COMM after [0-9.]+ s: .*$names_op")
[ "$n" -eq "$survivors" ] || fail "$n of $survivors survivors' ZINC_ERR_COMM named the collective"
n=$(count "^survivor [0-9]+: later call: ZINC_ERR_COMM: .*$names_victim")
[ "$n" -eq "$survivors" ] || fail "$n of $survivors survivors' later calls named rank $victim"
for what in "ZINC_ERR_COMM after" "destroy returned after" "exited after"; do
  n=$(count "^survivor [0-9]+: $what [0-9.]+ s")
  [ "$n" -eq "$survivors" ] || fail "$n of $survivors survivors printed \"$what\""
  slow=$(echo "$out" | sed -n "s/^survivor [0-9]*: $what \([0-9.]*\) s.*/\1/p" |
         awk -v l=$limit '$1 > l' | head -1)
  [ -z "$slow" ] || fail "a survivor's \"$what\" came $slow s after the kill (limit $limit s: comm_timeout_s $timeout_s + 5)"
done
n=$(count "^survivor [0-9]+: destroy took [0-9.]+ s")
[ "$n" -eq "$survivors" ] || fail "$n of $survivors survivors printed \"destroy took\""
slow=$(echo "$out" | sed -n "s/^survivor [0-9]*: destroy took \([0-9.]*\) s.*/\1/p" |
       awk -v l=$destroy_limit '$1 > l' | head -1)
[ -z "$slow" ] || fail "a survivor's zinc_engine_destroy took $slow s (limit $destroy_limit s, half the comm timeout: a comm the engine owns waited for the lost rank)"
echo "PASS: $survivors survivors failed with ZINC_ERR_COMM naming rank $victim and the collective, destroyed within $destroy_limit s and exited within $limit s"
