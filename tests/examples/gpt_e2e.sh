#!/usr/bin/env bash
# gpt_e2e.sh — end-to-end tests of the GPT example: gpt_train under mpirun,
# its per-step CSV (--log-csv) checked here.
#
#   gpt_e2e.sh loss   NP CONFIG STEPS THRESHOLD [gpt_train flags...]
#       the mean loss of the last 10 steps must be below THRESHOLD
#   gpt_e2e.sh stages NP STEPS CONFIG CONFIG...
#       every config gives the same step,loss,lr,grad_norm columns, bit for bit
#   gpt_e2e.sh resume NP CONFIG STEPS
#       STEPS straight == STEPS/2, checkpoint, resume to STEPS (rows after
#       the checkpoint identical, bit for bit: the same data stream, whose
#       position the checkpoint's trainer state carries)
#   gpt_e2e.sh init NP CONFIG_A CONFIG_B STEPS
#       --init-weights: STEPS trained with CONFIG_A, exported (zinc-ckpt),
#       renamed with a "model." prefix; a run with CONFIG_B starting from
#       that file (--init-prefix model.) has a first loss at least 0.3 below
#       the first run's; without --init-prefix it refuses, naming a missing
#       parameter
#   gpt_e2e.sh frozen NP CONFIG STEPS
#       --freeze-embedding: the token embedding wte (tied to the output
#       projection) saved after step 1 and after STEPS is bitwise the same
#       (zinc-ckpt export), wpe is not, and the mean loss of the last 10
#       steps is at least 0.3 below the first step's
#   gpt_e2e.sh readme NP CONFIG STEPS
#       examples/README.md's first command with the default model, cut to
#       STEPS steps: it runs and prints progress, a sample and the memory
#       report (its column headers apart, the CPU device's memory as host)
#   gpt_e2e.sh gap NP CONFIG STEPS BOUND WANT JSON [gpt_train flags...]
#       the same run (same seed, same data) without and with JSON's members
#       merged into the config (zero_optimization's objects merged key by
#       key): the gap of the mean loss of the last 10 steps (with - without)
#       must be <= BOUND when WANT is "within", > BOUND when WANT is
#       "beyond" (a deliberately broken setting the bound must catch);
#       JSON's member "base" (if any) is merged into both runs first (e.g.
#       another optimizer for the exact run too)
#   gpt_e2e.sh monitors NP CONFIG STEPS
#       the config plus "csv_monitor" and "tensorboard" sections and
#       wall_clock_breakdown: gpt_monitors_check.py reads the logs back
#       against --log-csv; DeepSpeed's timer lines are printed
#
# Environment: GPT_TRAIN (the binary), MPIEXEC (mpirun), ZINC_CKPT (zinc-ckpt, for frozen), ZINC_TEST_SOURCE_DIR
# (the configs), GPT_E2E_WORK (scratch directory; removed on success).
# Every run but `readme` uses a small model (2 layers, width 64) so the suite
# stays short.
set -euo pipefail

mode=$1; shift
np=$1; shift
src=${ZINC_TEST_SOURCE_DIR:?}
work=${GPT_E2E_WORK:-$(mktemp -d /tmp/zinc_gpt_e2e.XXXXXX)}
rm -rf "$work" && mkdir -p "$work"
small=(--layers 2 --width 64 --heads 4 --seq 64 --sample 0)

# A copy of a config whose nvme_path points into this test's scratch space.
config() {
  local c=$src/examples/configs/$1 out=$work/$1
  mkdir -p "$work/nvme"
  sed "s|/tmp/zinc_nvme|$work/nvme|g" "$c" > "$out"
  echo "$out"
}

run() { # run NAME CONFIG FLAGS...: gpt_train with --log-csv $work/NAME.csv
  local name=$1 cfg=$2; shift 2
  echo "+ mpirun -n $np gpt_train --config $(basename "$cfg") $*"
  if ! "$MPIEXEC" -n "$np" --oversubscribe "$GPT_TRAIN" --config "$cfg" "${small[@]}" \
       --log-csv "$work/$name.csv" "$@" > "$work/$name.out" 2>&1; then
    tail -n 30 "$work/$name.out"
    echo "FAIL: gpt_train ($name) exited with an error"
    exit 1
  fi
}

# A gap test's exact run is the same for every test of the same config,
# steps and flags (the runs are deterministic), so its CSV is kept in
# GPT_E2E_CACHE (default: gap_exact_cache beside gpt_train) under a hash of
# the exact config (the scratch path masked), the rank count, the flags and
# the size and mtime of gpt_train and libzinc: a rebuild starts afresh.
exact_run() { # exact_run CONFIG FLAGS...: $work/exact.csv
  local cfg=$1; shift
  local cache=${GPT_E2E_CACHE:-$(dirname "$GPT_TRAIN")/gap_exact_cache} key lib
  lib=$(ldd "$GPT_TRAIN" 2>/dev/null | awk '/libzinc/ { print $3 }')
  key=$( { sed "s|$work|WORK|g" "$cfg"; echo "np $np $*"
           stat -c '%s %Y' "$GPT_TRAIN" ${lib:+"$lib"}; } | sha256sum | cut -c1-32)
  if [ -s "$cache/$key.csv" ]; then
    cp "$cache/$key.csv" "$work/exact.csv"
    echo "+ the exact run: the same as an earlier test's ($cache/$key.csv)"
    return
  fi
  run exact "$cfg" "$@"
  mkdir -p "$cache" && cp "$work/exact.csv" "$cache/$key.csv.$$" &&
    mv "$cache/$key.csv.$$" "$cache/$key.csv"
}

case $mode in
loss)
  cfg=$(config "$1") steps=$2 threshold=$3; shift 3
  run loss "$cfg" --steps "$steps" "$@"
  grep -E '^step|tokens/s' "$work/loss.out" | tail -n 4
  awk -F, -v t="$threshold" 'NR > 1 { l[NR] = $2; n = NR }
    END { s = 0; k = 0; for (i = n - 9; i <= n; i++) if (i > 1) { s += l[i]; k++ }
          m = s / k; printf "first loss %.4f, mean of the last %d: %.4f (threshold %s)\n", l[2], k, m, t;
          exit !(m < t) }' "$work/loss.csv" || { echo "FAIL: the loss did not fall below $threshold"; exit 1; }
  ;;
stages)
  steps=$1; shift
  first=""
  for c in "$@"; do
    name=${c%.json}
    run "$name" "$(config "$c")" --steps "$steps"
    cut -d, -f1-4 "$work/$name.csv" > "$work/$name.cols"
    if [ -z "$first" ]; then first=$name; continue; fi
    if ! cmp -s "$work/$first.cols" "$work/$name.cols"; then
      echo "FAIL: $name differs from $first (step,loss,lr,grad_norm); first differences:"
      diff "$work/$first.cols" "$work/$name.cols" | head -n 6
      exit 1
    fi
    echo "$name: $(($(wc -l < "$work/$name.cols") - 1)) steps identical to $first"
  done
  ;;
gap)
  cfg=$(config "$1") steps=$2 bound=$3 want=$4 extra=$5; shift 5
  python3 - "$cfg" "$extra" "$work/compressed.json" "$work/exact.json" <<'PY' || exit 1
import json, sys
cfg = json.load(open(sys.argv[1]))
def merge(cfg, extra):
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k].update(v)
        else:
            cfg[k] = v
extra = json.loads(sys.argv[2])
merge(cfg, extra.pop("base", {}))  # "base": members of both runs
json.dump(cfg, open(sys.argv[4], "w"), indent=1)
merge(cfg, extra)
json.dump(cfg, open(sys.argv[3], "w"), indent=1)
PY
  exact_run "$work/exact.json" --steps "$steps" "$@"
  run compressed "$work/compressed.json" --steps "$steps" "$@"
  grep -m1 -E "compressed communication|delayed gradient averaging|optimizer state: bf16" \
    "$work/compressed.out" || { echo "FAIL: the engine did not say it applies $extra"; exit 1; }
  awk -F, -v b="$bound" -v want="$want" -v what="$extra" '
    FNR == 1 { f++ } FNR > 1 { l[f, FNR] = $2; n[f] = FNR }
    END { for (f = 1; f <= 2; f++) { s = 0; k = 0
            for (i = n[f] - 9; i <= n[f]; i++) if (i > 1) { s += l[f, i]; k++ }
            m[f] = s / k }
          g = m[2] - m[1]
          printf "mean loss of the last 10 steps: exact %.4f, with %s %.4f: gap %+.4f (bound %s, want %s)\n",
                 m[1], what, m[2], g, b, want
          exit !(want == "within" ? g <= b : g > b) }' "$work/exact.csv" "$work/compressed.csv" || {
    echo "FAIL: the loss gap is not $want the bound $bound"; exit 1; }
  ;;
resume)
  cfg=$(config "$1") steps=$2 half=$(($2 / 2))
  run straight "$cfg" --steps "$steps"
  run resumed "$cfg" --steps "$half" --ckpt-dir "$work/ckpt"
  run resumed "$cfg" --steps "$steps" --ckpt-dir "$work/ckpt" --resume
  grep -q "resumed from" "$work/resumed.out" || { echo "FAIL: the second run did not resume"; exit 1; }
  cut -d, -f1-4 "$work/straight.csv" > "$work/straight.cols"
  cut -d, -f1-4 "$work/resumed.csv" > "$work/resumed.cols"
  if ! cmp -s "$work/straight.cols" "$work/resumed.cols"; then
    echo "FAIL: the resumed run differs from the straight one; first differences:"
    diff "$work/straight.cols" "$work/resumed.cols" | head -n 6
    exit 1
  fi
  grep "resumed from" "$work/resumed.out"
  echo "steps $((half + 1))..$steps after resuming from global_step$half: identical"
  ;;
init)
  cfg_a=$(config "$1") cfg_b=$(config "$2") steps=$3
  run first "$cfg_a" --steps "$steps" --ckpt-dir "$work/ck"
  "${ZINC_CKPT:?}" export "$work/ck" "$work/trained.safetensors" --dtype f32 > /dev/null
  python3 - "$work/trained.safetensors" "$work/prefixed.safetensors" <<'PY' || exit 1
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
out = {("model." + k if k != "__metadata__" else k): v for k, v in head.items()}
text = json.dumps(out).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
print("%d tensors renamed model.*" % (len(out) - ("__metadata__" in out)))
PY
  run init "$cfg_b" --steps 5 --init-weights "$work/prefixed.safetensors" --init-prefix model.
  grep "initial weights" "$work/init.out"
  awk -F, 'FNR == 2 { f[++k] = $2 }
    END { printf "first loss from scratch %.4f, from the trained weights %.4f\n", f[1], f[2];
          exit !(f[2] < f[1] - 0.3) }' "$work/first.csv" "$work/init.csv" || {
    echo "FAIL: the run from the trained weights does not start below the first run"; exit 1; }
  if "$MPIEXEC" -n "$np" --oversubscribe "$GPT_TRAIN" --config "$cfg_b" "${small[@]}" \
       --steps 1 --init-weights "$work/prefixed.safetensors" > "$work/noprefix.out" 2>&1; then
    echo "FAIL: names without their prefix loaded"; exit 1
  fi
  grep -q 'missing parameter.*"embed' "$work/noprefix.out" || {
    tail -n 5 "$work/noprefix.out"; echo "FAIL: the refusal does not name a missing parameter"; exit 1; }
  grep -m1 -o 'strict): .*' "$work/noprefix.out" | cut -c1-160
  ;;
frozen)
  cfg=$(config "$1") steps=$2
  run frozen1 "$cfg" --steps 1 --freeze-embedding --ckpt-dir "$work/ck1"
  run frozen "$cfg" --steps "$steps" --freeze-embedding --ckpt-dir "$work/ckN"
  for k in 1 N; do
    "${ZINC_CKPT:?}" export "$work/ck$k" "$work/ck$k.safetensors" --dtype f32 > /dev/null
  done
  python3 - "$work/ck1.safetensors" "$work/ckN.safetensors" <<'PY' || exit 1
import json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
            for k, v in head.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
wte = [k for k in a if k.endswith("wte")]
wpe = [k for k in a if k.endswith("wpe")]
if len(wte) != 1 or len(wpe) != 1:
    sys.exit("FAIL: no single wte/wpe among %s" % sorted(a))
if a[wte[0]] != b[wte[0]]:
    sys.exit("FAIL: %s changed between step 1 and the last step" % wte[0])
if a[wpe[0]] == b[wpe[0]]:
    sys.exit("FAIL: %s did not change (is anything trained?)" % wpe[0])
print("%s bitwise unchanged (%d bytes), %s trained" % (wte[0], len(a[wte[0]]), wpe[0]))
PY
  awk -F, 'NR > 1 { l[NR] = $2; n = NR }
    END { s = 0; k = 0; for (i = n - 9; i <= n; i++) if (i > 1) { s += l[i]; k++ }
          m = s / k; printf "first loss %.4f, mean of the last %d: %.4f\n", l[2], k, m;
          exit !(m < l[2] - 0.3) }' "$work/frozen.csv" || {
    echo "FAIL: the loss did not fall by 0.3 with the embedding frozen"; exit 1; }
  ;;
readme)
  small=()
  run readme "$(config "$1")" --steps "$2" --sample 40 --ckpt-dir "$work/ckpt"
  for want in '^step ' '^sample ' '^memory: ' '^checkpoints: ' \
              ' buffers  *activations ' '^ *0  host '; do
    grep -q -- "$want" "$work/readme.out" || {
      cat "$work/readme.out"; echo "FAIL: no line matching '$want' in the output"; exit 1; }
  done
  cat "$work/readme.out"
  ;;
monitors)
  cfg=$(config "$1") steps=$2
  py=/usr/bin/python3
  [ -x "$src/.venv/bin/python3" ] && py=$src/.venv/bin/python3
  # the monitor sections; prints train_batch_size (micro x accumulation x ranks)
  batch=$("$py" - "$cfg" "$work/logs" "$np" <<'PY'
import json, sys
path, logs, np = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = json.load(open(path))
c["wall_clock_breakdown"] = True
c["csv_monitor"] = {"enabled": True, "output_path": logs, "job_name": "gpt"}
c["tensorboard"] = {"enabled": True, "output_path": logs + "/tb", "job_name": "gpt"}
json.dump(c, open(path, "w"), indent=2)
print(c["train_micro_batch_size_per_gpu"] * c.get("gradient_accumulation_steps", 1) * np)
PY
)
  run monitors "$cfg" --steps "$steps"
  n=$(grep -c '^\[Rank 0\] time (ms) | fwd: ' "$work/monitors.out" || true)
  [ "$n" = "$steps" ] || { cat "$work/monitors.out"; echo "FAIL: $n wall_clock_breakdown lines, expected $steps"; exit 1; }
  "$py" "$src/tests/examples/gpt_monitors_check.py" "$work/monitors.csv" "$work/logs/gpt" \
    "$work/logs/tb/gpt" "$batch"
  ;;
*)
  echo "usage: $0 loss|stages|resume|init|frozen|readme|monitors NP ..." >&2
  exit 2
  ;;
esac
rm -rf "$work"
echo PASS
