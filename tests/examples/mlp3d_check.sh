#!/usr/bin/env bash
# Pipeline parallelism gives the same bits as data parallelism alone where
# the arithmetic is the same: the 3D example (examples/mlp3d) trained with
# p = 2 and 4 stages (1F1B, 4 micro-batches a step, gradient clipping at
# 0.05, below every step's norm, so that the norm reaches the weights)
# against p = 1 with the same data-parallel size, at ZeRO stages 0-2 with
# offload none, cpu and NVMe: every step's loss and gradient norm, and every
# parameter's final bytes, equal. With tensor parallelism (tp 2) the sums
# inside a block are split, so the losses agree within a tolerance instead.
# Checkpoints of a pipeline resume bitwise; the memory report shows each
# stage's bytes.
# usage: mlp3d_check.sh MLP3D MPIEXEC OUTDIR [CASES]
#   CASES: "zero:offload:dp" triples (default: the sample below)
set -euo pipefail
bin=$1 mpiexec=$2 out=$3
cases=${4:-"0:none:1 1:none:2 2:none:1 1:cpu:1 2:cpu:2 2:nvme:2"}
rm -rf "$out"; mkdir -p "$out/nvme"
run() { # name np args...
  local name=$1 np=$2; shift 2
  "$mpiexec" -n "$np" --oversubscribe "$bin" --steps 6 --micro 4 --clip 0.05 --dump "$out/$name" "$@" \
    >"$out/$name.log" 2>&1 || { cat "$out/$name.log"; echo "FAIL: $name (mlp3d $*)"; exit 1; }
  grep '^step' "$out/$name.log" >"$out/$name.steps"
  cat "$out/$name"/stage* | sort >"$out/$name.params"
  [ "$(wc -l <"$out/$name.steps")" -eq 6 ] || { cat "$out/$name.log"; echo "FAIL: $name: not 6 steps"; exit 1; }
}
same() { # ref other
  cmp -s "$out/$1.steps" "$out/$2.steps" || { diff "$out/$1.steps" "$out/$2.steps" || true
    echo "FAIL: $2's losses or norms differ from $1's"; exit 1; }
  cmp -s "$out/$1.params" "$out/$2.params" || { diff "$out/$1.params" "$out/$2.params" || true
    echo "FAIL: $2's final parameters differ from $1's"; exit 1; }
}
for c in $cases; do
  IFS=: read -r zero offload dp <<<"$c"
  flags=(--zero "$zero" --offload "$offload" --nvme-path "$out/nvme")
  ref=z${zero}_${offload}_dp${dp}_pp1
  run "$ref" "$dp" "${flags[@]}"
  for pp in 2 4; do
    run "z${zero}_${offload}_dp${dp}_pp$pp" $((pp * dp)) "${flags[@]}" --pp "$pp"
    same "$ref" "z${zero}_${offload}_dp${dp}_pp$pp"
  done
  echo "ZeRO $zero, offload $offload, dp $dp: pp 2 and 4 bitwise equal to pp 1 ($(wc -l <"$out/$ref.params") parameters, 6 steps)"
done
# tensor parallelism inside each stage: pp 2 x tp 2 against pp 1 x tp 1, a
# stated tolerance (fp32 sums split across the group)
run tp_ref 1 --zero 1
run tp_pp2 4 --zero 1 --pp 2 --tp 2
paste "$out/tp_ref.steps" "$out/tp_pp2.steps" | awk '{ d = $4 - $13; if (d < 0) d = -d;
  if (d > 1e-5 * $4) { print "FAIL: step " $2 ": loss " $4 " (tp 1) vs " $13 " (pp 2 x tp 2)"; bad = 1 } }
  END { exit bad }'
echo "pp 2 x tp 2: every loss within 1e-5 (relative) of pp 1 x tp 1"
# checkpoints of a pipeline: each stage's part (its tensor-parallel parts
# inside), published together; a run resumed from one continues as the run
# that never stopped, bit for bit; another pipeline size is refused
# naming both sizes, on every rank, changing nothing
resume() { # name np flags...: 3 steps and a save, then 6 resumed, against 6 straight
  local name=$1 np=$2; shift 2
  local ck="$out/$name.ckpt"
  run "${name}_straight" "$np" "$@"
  "$mpiexec" -n "$np" --oversubscribe "$bin" --steps 3 --micro 4 --clip 0.05 --ckpt-dir "$ck" "$@" \
    >"$out/$name.first.log" 2>&1 || { cat "$out/$name.first.log"; echo "FAIL: $name: the first half"; exit 1; }
  "$mpiexec" -n "$np" --oversubscribe "$bin" --steps 6 --micro 4 --clip 0.05 --ckpt-dir "$ck" \
    --resume --dump "$out/${name}_resumed" "$@" >"$out/$name.resumed.log" 2>&1 ||
    { cat "$out/$name.resumed.log"; echo "FAIL: $name: the resumed half"; exit 1; }
  grep -q "resumed from .* at step 3" "$out/$name.resumed.log" || {
    cat "$out/$name.resumed.log"; echo "FAIL: $name did not resume at step 3"; exit 1; }
  cat "$out/$name.first.log" "$out/$name.resumed.log" | grep '^step' >"$out/${name}_resumed.steps"
  cat "$out/${name}_resumed"/stage* | sort >"$out/${name}_resumed.params"
  same "${name}_straight" "${name}_resumed"
  echo "$name: saved at step 3, resumed: bitwise the run that never stopped"
}
resume pp2_dp2_z1 4 --zero 1 --pp 2
resume pp2_tp2_z2_cpu 4 --zero 2 --offload cpu --pp 2 --tp 2
[ -d "$out/pp2_tp2_z2_cpu.ckpt/global_step3/pp_stage_01/mp_rank_01" ] || {
  find "$out/pp2_tp2_z2_cpu.ckpt"; echo "FAIL: no part for stage 1, tensor-parallel rank 1"; exit 1; }
for pp in 1 4; do
  if "$mpiexec" -n 4 --oversubscribe "$bin" --steps 6 --zero 1 --pp $pp --ckpt-dir "$out/pp2_dp2_z1.ckpt" \
       --resume >"$out/refused$pp.log" 2>&1; then
    cat "$out/refused$pp.log"; echo "FAIL: a pp 2 checkpoint loaded at pp $pp"; exit 1
  fi
  n=$(grep -c "saved with pipeline_parallel_size 2 and this engine runs pipeline_parallel_size $pp" \
      "$out/refused$pp.log" || true)
  [ "$n" -eq 4 ] || { cat "$out/refused$pp.log"; echo "FAIL: $n of 4 ranks named both pipeline sizes"; exit 1; }
done
echo "a pp 2 checkpoint at pp 1 and pp 4: refused on every rank, naming both sizes"
if [ -n "${ZINC_CKPT:-}" ]; then # the tool lists and verifies each stage's part
  top="$out/pp2_dp2_z1.ckpt/global_step3"
  for s in 0 1; do
    "$ZINC_CKPT" verify "$top" pp_stage_0$s >/dev/null || { echo "FAIL: zinc-ckpt verify stage $s"; exit 1; }
    "$ZINC_CKPT" list "$top" pp_stage_0$s | grep -q "pipeline stage $s of 2" || {
      echo "FAIL: zinc-ckpt list does not name stage $s"; exit 1; }
  done
  said=$("$ZINC_CKPT" list "$out/pp2_dp2_z1.ckpt" global_step3 2>&1 || true)
  echo "$said" | grep -q "name a part as DIR/TAG and pp_stage_SS" || {
    echo "$said"; echo "FAIL: zinc-ckpt does not say how to name a stage's part"; exit 1; }
  echo "zinc-ckpt: lists and verifies each stage's part, and says how to name one"
fi

# memory per stage: the report names each rank's stage, and a stage holds
# the activations of p - s micro-batches in flight (the same parameters
# on every stage here), so its bytes fall from the first stage to the last
run mem 4 --zero 1 --pp 4 --layers 8 --batch 64 --memory
grep -E '^  [0-9]+:s[0-9]+ ' "$out/mem.log" | awk '{ split($1, rs, ":s"); if (rs[2] != NR - 1) bad = 1
    if (NR > 1 && $2 >= prev) bad = 1; prev = $2; n++ }
  END { if (n != 4 || bad) { print "FAIL: the memory report does not show 4 stages holding less the later they come"; exit 1 } }' || {
  cat "$out/mem.log"; exit 1; }
echo "memory per stage: 4 stages, each holding less than the one before (p - s micro-batches in flight)"
rm -rf "$out"
