#!/usr/bin/env bash
# cluster_test.sh — multi-node tests on an emulated cluster (cluster.sh).
# Each mode brings up its own cluster under a name no other run uses
# (t<pid>), and takes it down on exit whatever happens (trap).
#
#   cluster_test.sh selftest PROBE
#       2 nodes x 2 ranks at 1 gbit: cluster_probe sees two hostnames, an
#       allreduce across the nodes is right, a 32 MiB transfer between the
#       nodes runs at 0.6-1.05 Gbit/s; `down` leaves no namespace behind.
#   cluster_test.sh stages TEST_STAGES CASES
#       the stages oracle (test_stages, its cases CASES: "1" is fp32 with
#       accumulation 1, "14" adds fp16) at 2 nodes x 2 ranks passes, and every run's final parameters
#       are byte for byte those of the same program at one node x 4 ranks.
#   cluster_test.sh ckpt CLUSTER_CKPT
#       saved at 2 nodes x 2 ranks, stage 3; loaded at one node x 2 ranks,
#       stage 2, and continued: the state loaded is the state saved, byte
#       for byte; the continued run matches the reference trainer over all
#       steps (cluster_ckpt checks) and is byte for byte the run that saved
#       at one node x 4 ranks and continued the same way.
#   cluster_test.sh gpt GPT_TRAIN CONFIG STEPS
#       the GPT example for STEPS steps at 2 nodes x 2 ranks: its
#       step,loss,lr,grad_norm columns are bit for bit those of one node x 4
#       ranks, and the loss falls.
#   cluster_test.sh comms-logger TEST_COMMS_LOGGER
#       ZeRO-3 runs (3 steps, f32 and bf16) with the comms logger at 2 nodes x 2 ranks on
#       the real node boundary (no ZINC_COMM_NODE_SIZE): the node-aware path
#       runs (algo hier) and every collective's intra- and inter-node wire
#       bytes are the closed form test_comms_logger computes for 2 nodes of
#       2 (the inter-node bytes nonzero), as under nodes faked on one machine.
#   cluster_test.sh node-loss CLUSTER_NODE_LOSS
#       2 nodes x 2 ranks, zinc.comm_timeout_s 5: a checkpoint is saved, then
#       node 1's link is cut mid-step. Ranks 0 and 1 must fail with
#       ZINC_ERR_COMM naming the lost ranks whose messages they were waiting
#       for (2, 3 or both; never 0 or 1) within 5 s + 3 s of the cut,
#       destroy and exit within 5 s + 5 s; the launcher is then killed (it
#       waits for node 1, which it cannot reach) and `down` kills node 1's
#       processes; the checkpoint then loads at 2 ranks on one node.
#
# Environment: MPIEXEC (mpirun, for the one-node runs; default mpirun),
# CLUSTER_WORK (scratch directory; default a temporary one, removed on
# success), ZINC_TEST_SOURCE_DIR. Exit 77 with "SKIPPED: <why>" when the
# machine cannot make the cluster (not root, no network namespaces, no
# unshare, no mpirun).
set -uo pipefail

mode=${1:?mode}; shift
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/cluster.sh
mpiexec=${MPIEXEC:-mpirun}
name=t$$
name=${name:0:10}

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "the emulated cluster needs root (network namespaces, bridges, tc)"
for tool in ip tc unshare "$mpiexec"; do
  command -v "$tool" >/dev/null || skip "no $tool on PATH (scripts/setup.sh installs iproute2, util-linux, openmpi-bin)"
done
probe_ns=zinc-probe-$$
ip netns add "$probe_ns" 2>/dev/null || skip "cannot create a network namespace (ip netns add)"
ip netns del "$probe_ns"
unshare --uts true 2>/dev/null || skip "cannot create a UTS namespace (unshare --uts)"

work=${CLUSTER_WORK:-$(mktemp -d /tmp/zinc_cluster_test.XXXXXX)}
rm -rf "$work" && mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1

# A test killed outright (ctest's timeout sends SIGKILL) cannot take its
# cluster down: the next test does, for every t<pid> whose process is gone.
for dir in /tmp/zinc-cluster/t*; do
  [ -d "$dir" ] || continue
  pid=${dir##*/t}
  [[ $pid =~ ^[0-9]+$ ]] && ! kill -0 "$pid" 2>/dev/null &&
    "$cluster" down --name "t$pid" >/dev/null 2>&1
done

launcher="" # the running job's process group (setsid), killed on exit
cleanup() {
  [ -z "$launcher" ] || kill -KILL -- -"$launcher" 2>/dev/null
  "$cluster" down --name "$name" >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 130' INT TERM

up() { "$cluster" up "$@" --name "$name" || fail "cluster.sh up $*"; }
# bounded LOG CMD...: CMD in its own process group, at most 150 s; waited
# for in the background so that a signal reaches the traps at once.
bounded() {
  local log=$1 rc; shift
  setsid timeout -k 5 150 "$@" >"$log" 2>&1 &
  launcher=$!
  wait "$launcher"; rc=$?
  launcher=""
  return $rc
}
# on_cluster LOG ARGS...: mpirun over the cluster.
on_cluster() {
  local log=$1; shift
  echo "+ cluster.sh run -- $*"
  bounded "$log" "$cluster" run --name "$name" -- "$@" ||
    { tail -n 30 "$log"; fail "the cluster job ($*) failed"; }
}
# one_node LOG NP ARGS...: plain mpirun on the host.
one_node() {
  local log=$1 np=$2; shift 2
  echo "+ mpirun -n $np $*"
  bounded "$log" "$mpiexec" -n "$np" --oversubscribe "$@" ||
    { tail -n 30 "$log"; fail "the one-node job ($*) failed"; }
}
same_bytes() { # same_bytes A B WHAT
  [ -s "$1" ] || fail "$3: $1 is empty or missing"
  cmp "$1" "$2" || fail "$3 differ"
  echo "$3: $(stat -c %s "$1") bytes identical"
}

case $mode in
selftest)
  probe=$1
  up 2 --ppn 2 --rate 1gbit
  on_cluster "$work/probe.out" -n 4 "$probe" 32
  cat "$work/probe.out"
  hosts=$(sed -n 's/^rank [0-9]* host //p' "$work/probe.out" | sort -u | tr '\n' ' ')
  [ "$hosts" = "$name-n0 $name-n1 " ] || fail "hostnames '$hosts', expected $name-n0 and $name-n1"
  grep -q "^sum 10 hosts 2$" "$work/probe.out" || fail "the allreduce across nodes is wrong"
  rate=$(sed -n 's/^transfer .*: \([0-9.]*\) Gbit\/s$/\1/p' "$work/probe.out")
  awk -v r="$rate" 'BEGIN { exit !(r >= 0.6 && r <= 1.05) }' ||
    fail "the link ran at '$rate' Gbit/s, shaped to 1 gbit"
  "$cluster" down --name "$name" >/dev/null
  left=$(ip netns list | grep -c "^zinc-$name-" || true)
  [ "$left" -eq 0 ] || fail "$left namespaces left after down"
  ip link show "zb$name" >/dev/null 2>&1 && fail "bridge zb$name left after down"
  echo "PASS: 2 hostnames, allreduce across nodes, $rate Gbit/s on a 1 gbit link, nothing left after down"
  ;;
stages)
  bin=$1 cases=$2
  up 2 --ppn 2
  on_cluster "$work/cluster.out" -n 4 -x ZINC_TEST_BINARY_DIR="$work" "$bin" "$work/cluster.params" "$cases"
  grep -E 'ranks: stages' "$work/cluster.out"
  ZINC_TEST_BINARY_DIR=$work one_node "$work/one.out" 4 "$bin" "$work/one.params" "$cases"
  same_bytes "$work/cluster.params" "$work/one.params" \
    "every stages-oracle run's final parameters, 2 nodes x 2 ranks vs 1 node x 4 ranks,"
  echo "PASS: the stages oracle holds at 2 nodes x 2 ranks and gives one node's bits"
  ;;
ckpt)
  bin=$1 save_steps=6 more_steps=6
  up 2 --ppn 2
  on_cluster "$work/save.out" -n 4 "$bin" save "$work/ck_cluster" 3 $save_steps "$work/cluster.saved"
  cat "$work/save.out"
  one_node "$work/resume.out" 2 "$bin" resume "$work/ck_cluster" 2 $more_steps "$work/cluster.final"
  cat "$work/resume.out"
  # the same transitions on one node: saved at 4 ranks, loaded at 2
  one_node "$work/save1.out" 4 "$bin" save "$work/ck_one" 3 $save_steps "$work/one.saved"
  one_node "$work/resume1.out" 2 "$bin" resume "$work/ck_one" 2 $more_steps "$work/one.final"
  same_bytes "$work/cluster.final.loaded" "$work/cluster.saved" \
    "the state loaded at 1 x 2 and the state saved at 2 x 2"
  same_bytes "$work/cluster.saved" "$work/one.saved" "the state saved at 2 x 2 and at 1 x 4"
  same_bytes "$work/cluster.final" "$work/one.final" \
    "the state $more_steps steps after the load, from the 2 x 2 and the 1 x 4 checkpoint,"
  echo "PASS: saved at 2 nodes x 2 ranks, loaded and continued at 1 node x 2 ranks"
  ;;
gpt)
  bin=$1 cfg=$ZINC_TEST_SOURCE_DIR/examples/configs/$2 steps=$3
  small=(--layers 2 --width 64 --heads 4 --seq 64 --sample 0 --steps "$steps")
  up 2 --ppn 2
  on_cluster "$work/cluster.out" -n 4 "$bin" --config "$cfg" "${small[@]}" --log-csv "$work/cluster.csv"
  one_node "$work/one.out" 4 "$bin" --config "$cfg" "${small[@]}" --log-csv "$work/one.csv"
  cut -d, -f1-4 "$work/cluster.csv" >"$work/cluster.cols"
  cut -d, -f1-4 "$work/one.csv" >"$work/one.cols"
  [ "$(wc -l <"$work/one.cols")" -eq $((steps + 1)) ] || fail "the one-node run logged $(wc -l <"$work/one.cols") lines, expected $((steps + 1))"
  cmp -s "$work/cluster.cols" "$work/one.cols" || {
    diff "$work/one.cols" "$work/cluster.cols" | head -n 6
    fail "the loss curve at 2 nodes x 2 ranks differs from 1 node x 4 ranks"; }
  awk -F, 'NR == 2 { first = $2 } END { printf "loss %.4f at step 1, %.4f at step %d\n", first, $2, $1;
    exit !($2 < first - 0.3) }' "$work/cluster.cols" || fail "the loss did not fall by 0.3"
  echo "PASS: $steps steps of the GPT example, step,loss,lr,grad_norm bit for bit those of one node"
  ;;
comms-logger)
  bin=$1
  up 2 --ppn 2
  on_cluster "$work/cluster.out" -n 4 "$bin" --nodes 2 --stage 3
  grep -qE 'FAIL' "$work/cluster.out" && { cat "$work/cluster.out"; fail "the logger's counts differ from the closed form"; }
  grep -E '^comms logger at 4 ranks \(2 nodes of 2\): stage 3 match the closed form$' "$work/cluster.out" ||
    { cat "$work/cluster.out"; fail "no closed-form verdict for 2 nodes of 2 at stage 3"; }
  grep -qE ' hier ' "$work/cluster.out" || { cat "$work/cluster.out"; fail "the summary shows no row on the node-aware path"; }
  echo "PASS: at stage 3 on 2 nodes x 2 ranks the logger's intra-/inter-node wire bytes are the closed form"
  ;;
node-loss)
  bin=$1 timeout_s=5
  up 2 --ppn 2
  log=$work/run.out
  echo "+ cluster.sh run -- --enable-recovery -n 4 $bin run $work/ck 2 3"
  setsid "$cluster" run --name "$name" -- --enable-recovery -n 4 "$bin" run "$work/ck" 2 3 >"$log" 2>&1 &
  launcher=$!
  for _ in $(seq 600); do
    [ "$(grep -c '^rank [0-9]*: saved at' "$log")" -ge 4 ] && break
    kill -0 "$launcher" 2>/dev/null || { cat "$log"; fail "the job ended before the save"; }
    sleep 0.1
  done
  [ "$(grep -c '^rank [0-9]*: saved at' "$log")" -ge 4 ] || { cat "$log"; fail "no save within 60 s"; }
  sleep 1
  cut_at=$(date +%s.%N)
  "$cluster" link --name "$name" 1 down
  echo "node 1's link cut at $cut_at"
  # the survivors (ranks 0 and 1) report and exit by themselves
  for _ in $(seq 300); do
    [ "$(grep -c '^rank [01]: exited at' "$log")" -ge 2 ] && break
    sleep 0.1
  done
  # mpirun still waits for node 1, which it cannot reach: kill it, and
  # node 1's processes with the cluster
  sleep 1
  kill -KILL -- -"$launcher" 2>/dev/null
  wait "$launcher" 2>/dev/null
  launcher=""
  "$cluster" down --name "$name" >/dev/null
  grep -E '^rank [0-9]+: ' "$log"
  if grep -qE 'ERROR: (Address|Leak|Undefined|Thread)Sanitizer|runtime error:' "$log"; then
    cat "$log"; fail "a sanitizer reported an error"
  fi
  # killed processes are reaped by init within moments
  for _ in $(seq 50); do
    left=$(pgrep -x "$(basename "$bin" | cut -c1-15)" | wc -l)
    [ "$left" -eq 0 ] && break
    sleep 0.1
  done
  [ "$left" -eq 0 ] || fail "$left processes of $(basename "$bin") still running 5 s after down"
  for r in 0 1; do
    line=$(grep -E "^rank $r: ZINC_ERR_COMM at " "$log") || { cat "$log"; fail "rank $r did not report ZINC_ERR_COMM"; }
    # the ranks whose messages had not arrived: one or both of 2 and 3
    # (rank 3's part of the step may have crossed before the cut), never a
    # survivor
    named=$(echo "$line" | sed -nE 's/.*waiting for peer rank(\(s\))? ([0-9,]+).*/\2/p')
    echo "$named" | grep -qE '^(2|3|2,3)$' ||
      fail "rank $r's message names rank(s) '$named', not the lost ranks 2 and/or 3: $line"
    for what in "ZINC_ERR_COMM at" "destroy returned at" "exited at"; do
      t=$(sed -n "s/^rank $r: $what \([0-9.]*\).*/\1/p" "$log")
      [ -n "$t" ] || fail "rank $r printed no \"$what\""
      limit=$((timeout_s + 3)); [ "$what" = "ZINC_ERR_COMM at" ] || limit=$((timeout_s + 5))
      awk -v t="$t" -v c="$cut_at" -v l="$limit" -v w="rank $r: ${what% at}" 'BEGIN { d = t - c;
        printf "%s %.1f s after the cut (limit %d s)\n", w, d, l; exit !(d >= 0 && d <= l) }' ||
        fail "rank $r's \"$what\" came outside 0..$limit s after the cut"
    done
  done
  # the last checkpoint on the survivors' world size: 2 ranks, one node
  one_node "$work/load.out" 2 "$bin" load "$work/ck" 2 3
  cat "$work/load.out"
  echo "PASS: node 1 lost: ranks 0 and 1 failed naming lost ranks, exited; the checkpoint loads at 2 ranks"
  ;;
*)
  fail "unknown mode '$mode'"
  ;;
esac
rm -rf "$work"
