#!/usr/bin/env bash
# gpu_check.sh — the first command on a machine with a GPU. Runs the CUDA
# path's checks in order and writes ONE markdown report with every command,
# every figure and PASS / FAIL / SKIPPED for each check:
#
#    1. environment: nvidia-smi, driver, CUDA, NCCL, MPI, GPU count
#    2. build: build/cuda (-DZINC_CUDA=ON) and build/cpu
#    3. the CUDA error test (test_cuda_errors)
#    4. every kernel test (test_cuda_* but the errors and the pools) under
#       compute-sanitizer memcheck
#    5. the reductions (sumsq, codec) under racecheck and synccheck
#    6. the caching pools (test_cuda_pool)
#    7. adam_bench --device cuda (fused Adam beside a device cudaMemcpy)
#    8. the NCCL comm at 1/2/4/8 ranks (test_comm_nccl_np*)
#    9. the stages oracle on GPUs (test_gpu_stages_np*: 1 rank bitwise,
#       more within its stated bound)
#   10. examples/mlp on the GPU against the CPU build, offload none/cpu/nvme
#   11. a rank SIGKILLed mid-step: every other rank exits with an error
#       naming it within comm_timeout_s + a margin
#   12. `ctest -L gpu`: every other GPU test (found by label, not by name)
#
# Steps that need more GPUs than the machine has say SKIPPED with the
# reason; without any GPU every GPU step says SKIPPED and the report's top
# says so. The script keeps going after a failed check and exits 1 if any
# check failed (0 otherwise, skips included).
#
#   scripts/gpu_check.sh [--report PATH] [--dry-run] [--gpus N] [--steps LIST]
#                        [--cuda-build DIR] [--cpu-build DIR] [--jobs N]
#   --report PATH   the report (default: $OUT/gpu_check_report.md when OUT is
#                   set, as on a lent device machine, else
#                   build/gpu_check/report.md); logs go beside it in logs/
#                   unless that is under $OUT (then build/gpu_check/logs)
#   --dry-run       the environment and each step's run/skip decision and
#                   commands only: nothing is built or run (seconds)
#   --gpus N        take N as the GPU count (rehearse the skip decisions)
#   --steps LIST    run only these steps (comma-separated numbers, ranges
#                   such as 3-12, or names:
#                   env,build,errors,memcheck,reductions,pool,adam,nccl,
#                   stages,mlp,kill,ctest); the environment is always written
#   --cuda-build / --cpu-build DIR   the two build folders (build/cuda,
#                   build/cpu); --cuda-build build/cpu rehearses steps 10-11
#                   on a machine without nvcc
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
args="$*"

report="" dry=0 gpus_override="" only="" jobs=$(nproc 2>/dev/null || echo 2)
cuda_build=build/cuda cpu_build=build/cpu
while [ $# -gt 0 ]; do
  case $1 in
    --report) report=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --gpus) gpus_override=$2; shift 2 ;;
    --steps) only=$2; shift 2 ;;
    --cuda-build) cuda_build=$2; shift 2 ;;
    --cpu-build) cpu_build=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$report" ]; then
  if [ -n "${OUT:-}" ]; then report=$OUT/gpu_check_report.md
  else report=build/gpu_check/report.md; fi
fi
mkdir -p "$(dirname "$report")"
report=$(cd "$(dirname "$report")" && pwd)/$(basename "$report")
logs=$(dirname "$report")/logs
if [ -n "${OUT:-}" ] && [[ $logs == "$OUT"* ]]; then logs=$root/build/gpu_check/logs; fi
mkdir -p "$logs"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1

# ------------------------------------------------------------ report helpers
: >"$report"
out() { printf '%s\n' "$*" >>"$report"; }
say() { printf '%s\n' "$*"; out "$*"; }
checks=() # "STATUS|step|check|detail"
record() { # STATUS STEP CHECK DETAIL
  checks+=("$1|$2|$3|$4")
  say "- **$1** $3${4:+ — $4}"
  [ "$1" = SKIPPED ] && echo "    (SKIPPED: $4)" >&2
}
want() { # step number and name
  [ -z "$only" ] && return 0
  local s
  for s in ${only//,/ }; do
    [ "$s" = "$1" ] || [ "$s" = "$2" ] && return 0
    [[ $s =~ ^([0-9]+)-([0-9]+)$ ]] && [ "$1" -ge "${BASH_REMATCH[1]}" ] &&
      [ "$1" -le "${BASH_REMATCH[2]}" ] && return 0
  done
  return 1
}
step_no=0
section() { step_no=$((step_no + 1)); out ""; say "## $step_no. $1"; out ""; }

# run LOGNAME TIMEOUT CMD... : the command in the report, its output's tail
# in a fenced block, the whole log in $logs; returns the command's status.
last_log=""
run() {
  local name=$1 limit=$2; shift 2
  last_log=$logs/$name.log
  out ""; out '```sh'; out "$ $*"; out '```'
  if [ $dry = 1 ]; then out "(dry run: not run)"; return 0; fi
  local t0=$SECONDS rc
  echo ">>> $*" >&2
  timeout --kill-after=10 "$limit" "$@" >"$last_log" 2>&1
  rc=$?
  out "exit status $rc after $((SECONDS - t0)) s (log: $last_log)"
  out '```'
  tail -n 40 "$last_log" >>"$report"
  out '```'
  return $rc
}
# status of a finished run: 0 PASS, 77 or a SKIPPED line SKIPPED, else FAIL
verdict() { # RC
  if [ $dry = 1 ]; then echo "WOULD RUN"; return; fi
  if [ "$1" = 77 ] || { [ "$1" = 0 ] && grep -qE '\*\*\*Skipped|^SKIPPED' "$last_log"; }; then
    echo SKIPPED
  elif [ "$1" = 0 ]; then echo PASS
  else echo FAIL; fi
}
skip_reason() { grep -m1 -oE 'SKIPPED[^"]*' "$last_log" 2>/dev/null || echo "skipped by the test"; }

# ctest's view of a build: names by label (discovery, so that new GPU tests
# are picked up without editing this script) and one test's command.
ctest_names() { # BUILD LABEL
  [ -f "$1/CTestTestfile.cmake" ] || return 0
  ctest --test-dir "$1" -N -L "$2" 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: *//p'
}
ctest_command() { # BUILD NAME -> NUL-separated argv
  ctest --test-dir "$1" --show-only=json-v1 -R "^$2\$" 2>/dev/null | python3 -c '
import json, sys
for a in json.load(sys.stdin)["tests"][0]["command"]:
    sys.stdout.write(a + "\0")'
}
ctest_one() { # BUILD NAME LOGNAME TIMEOUT
  run "$3" "$4" ctest --test-dir "$1" -R "^$2\$" --output-on-failure
}

# ------------------------------------------------------------ 1. environment
out "# zinc first-GPU-run report"
out ""
out "$(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
out ""
out "Command: \`scripts/gpu_check.sh $args\`"
[ $dry = 1 ] && out "" && out "**DRY RUN**: the decisions and commands only; nothing was built or run."

section "Environment"
gpus=0 smi_ok=0
if command -v nvidia-smi >/dev/null; then
  if nvidia-smi -L >"$logs/nvidia-smi-L.log" 2>&1; then
    smi_ok=1
    gpus=$(grep -c '^GPU ' "$logs/nvidia-smi-L.log")
  fi
fi
[ -n "$gpus_override" ] && gpus=$gpus_override
nccl_h=$(sed -n 's/^NCCL_INCLUDE_DIR:PATH=//p' "$cuda_build/CMakeCache.txt" 2>/dev/null)
[ -f "$nccl_h/nccl.h" ] || nccl_h=/usr/local/cuda/include
nccl_version=$(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{v=v (v ? "." : "") $3} END{print v}' \
  "$nccl_h/nccl.h" 2>/dev/null)
nvcc=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })
sanitizer=$(command -v compute-sanitizer ||
  { [ -x /usr/local/cuda/bin/compute-sanitizer ] && echo /usr/local/cuda/bin/compute-sanitizer; })
out "| what | value |"
out "| --- | --- |"
out "| GPU count | $gpus$([ -n "$gpus_override" ] && echo ' (set by --gpus)') |"
out "| driver | $( [ $smi_ok = 1 ] && nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 || echo 'none (no nvidia-smi or it failed)') |"
out "| CUDA (driver API, nvidia-smi) | $( [ $smi_ok = 1 ] && nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1 || echo none) |"
out "| CUDA toolkit (nvcc) | ${nvcc:+$($nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')} (${nvcc:-not found}) |"
out "| NCCL (header) | ${nccl_version:-not found} ($nccl_h/nccl.h) |"
out "| compute-sanitizer | ${sanitizer:-not found} |"
out "| MPI | $(mpirun --version 2>/dev/null | head -1 || echo 'not found') |"
out "| cmake | $(cmake --version 2>/dev/null | head -1) |"
out "| python3 | $(python3 --version 2>&1) |"
out "| CPU | $(nproc) cores, $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM |"
out "| kernel | $(uname -r) |"
out ""
if [ $smi_ok = 1 ]; then
  out '```'; nvidia-smi >>"$report" 2>&1
  nvidia-smi --query-gpu=index,name,memory.total,pci.bus_id,compute_cap --format=csv >>"$report" 2>&1
  nvidia-smi topo -m >>"$report" 2>&1; out '```'
fi
if [ "$gpus" -gt 0 ]; then
  record PASS env "GPUs found" "$gpus"
elif [ -n "$gpus_override" ]; then
  record SKIPPED env "GPUs" "--gpus 0: every GPU step is SKIPPED"
elif command -v nvidia-smi >/dev/null; then
  record FAIL env "GPUs" "nvidia-smi is installed but finds no GPU (driver problem?): $(head -c 300 "$logs/nvidia-smi-L.log")"
else
  record SKIPPED env "GPUs" "NO GPU ON THIS MACHINE (no nvidia-smi): every GPU step below is SKIPPED"
fi
need_gpus() { # N: 0 if the machine has N GPUs, else a SKIPPED reason on stdout
  if [ "$gpus" -ge "$1" ]; then return 0; fi
  if [ "$gpus" = 0 ]; then echo "no GPU on this machine"
  else echo "needs $1 GPUs (one per rank), this machine has $gpus"; fi
  return 1
}

# ------------------------------------------------------------ 2. build
section "Build"
if want 2 build; then
  if [ -z "$nvcc" ] && [ "$cuda_build" = build/cuda ]; then
    record SKIPPED build "$cuda_build" "no nvcc (install the CUDA toolkit under /usr/local/cuda)"
  else
    run configure_cuda 1200 cmake -S . -B "$cuda_build" -DZINC_CUDA=ON -DZINC_WERROR=ON \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZINC_BENCH=ON -DZINC_EXAMPLES=ON &&
      run build_cuda 3600 cmake --build "$cuda_build" -j "$jobs"
    record "$(verdict $?)" build "$cuda_build (-DZINC_CUDA=ON, -Werror)" "log: $last_log"
  fi
  run configure_cpu 600 cmake -S . -B "$cpu_build" -DZINC_CUDA=OFF -DZINC_WERROR=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZINC_EXAMPLES=ON &&
    run build_cpu 3600 cmake --build "$cpu_build" -j "$jobs"
  record "$(verdict $?)" build "$cpu_build (-DZINC_CUDA=OFF)" "log: $last_log"
else
  out "(not selected by --steps)"
fi

# ------------------------------------------------------------ 3. errors
section "CUDA error test"
if want 3 errors; then
  ctest_one "$cuda_build" test_cuda_errors test_cuda_errors 300
  record "$(verdict $?)" errors test_cuda_errors "missing-ordinal errors, pool buckets (no GPU needed)"
else out "(not selected by --steps)"; fi

# The GPU tests of the CUDA build, by label: kernel tests are the
# single-process test_cuda_* but the error test and the pools (steps 3, 6).
gpu_tests=$(ctest_names "$cuda_build" gpu)
kernel_tests=$(echo "$gpu_tests" | grep -E '^test_cuda_' | grep -vE '^test_cuda_(errors|pool)$|_np[0-9]+$')
reduction_tests=$(echo "$kernel_tests" | grep -E 'sumsq|codec|reduc')
if [ -z "$gpu_tests" ]; then
  out ""
  out "(no \`gpu\` tests listed by \`ctest --test-dir $cuda_build -N -L gpu\`: $cuda_build is not configured with -DZINC_CUDA=ON here; the sequence below names the tests a CUDA build has)"
  kernel_tests="test_cuda_adam test_cuda_optim test_cuda_sumsq test_cuda_elementwise test_cuda_codec"
  reduction_tests="test_cuda_sumsq test_cuda_codec"
fi

# sanitize TOOL TEST: the test's own command under compute-sanitizer
sanitize() {
  local tool=$1 t=$2 reason argv=()
  if ! reason=$(need_gpus 1); then record SKIPPED "$tool" "$t ($tool)" "$reason"; return; fi
  local cs=${sanitizer:-compute-sanitizer}
  if [ -z "$sanitizer" ] && [ $dry = 0 ]; then
    record FAIL "$tool" "$t ($tool)" "compute-sanitizer not found (PATH, /usr/local/cuda/bin)"; return
  fi
  if [ $dry = 0 ]; then
    mapfile -d '' argv < <(ctest_command "$cuda_build" "$t")
    [ ${#argv[@]} -gt 0 ] || { record FAIL "$tool" "$t ($tool)" "not in $cuda_build's ctest list"; return; }
  else argv=("$cuda_build/tests/gpu/$t"); fi
  run "${tool}_$t" 1800 "$cs" --tool "$tool" --error-exitcode 99 \
    $([ "$tool" = memcheck ] && echo --leak-check full) "${argv[@]}"
  local rc=$? v
  v=$(verdict $rc)
  [ "$v" = SKIPPED ] && { record SKIPPED "$tool" "$t ($tool)" "$(skip_reason)"; return; }
  record "$v" "$tool" "$t ($tool)" "$([ $dry = 0 ] && grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$last_log")"
}

# ------------------------------------------------------------ 4. memcheck
section "Kernel tests under compute-sanitizer memcheck"
if want 4 memcheck; then
  for t in $kernel_tests; do sanitize memcheck "$t"; done
else out "(not selected by --steps)"; fi

# ------------------------------------------------------------ 5. reductions
section "Reductions under racecheck and synccheck"
if want 5 reductions; then
  for t in $reduction_tests; do
    sanitize racecheck "$t"
    sanitize synccheck "$t"
  done
else out "(not selected by --steps)"; fi

# gpu_ctest STEP NAME DETAIL [GPUS]: one ctest test, skipped when the
# machine has fewer GPUs than it needs.
gpu_ctest() {
  local reason rc v
  if ! reason=$(need_gpus "${4:-1}"); then record SKIPPED "$1" "$2" "$reason"; return; fi
  ctest_one "$cuda_build" "$2" "$2" 1800
  rc=$?; v=$(verdict $rc)
  [ "$v" = SKIPPED ] && { record SKIPPED "$1" "$2" "$(skip_reason)"; return; }
  record "$v" "$1" "$2" "$3"
}

# ------------------------------------------------------------ 6. pools
section "Caching pools"
if want 6 pool; then
  gpu_ctest pool test_cuda_pool "no cudaMalloc after warm-up, busy blocks, trim, NUMA placement"
else out "(not selected by --steps)"; fi

# ------------------------------------------------------------ 7. adam_bench
section "adam_bench --device cuda"
if want 7 adam; then
  if reason=$(need_gpus 1); then
    run adam_bench 900 "$cuda_build/bench/adam_bench/adam_bench" --device cuda
    rc=$?
    record "$(verdict $rc)" adam "adam_bench --device cuda" \
      "$([ $dry = 0 ] && grep -m1 -E 'PASS|FAIL' "$last_log")"
  else record SKIPPED adam "adam_bench --device cuda" "$reason"; fi
else out "(not selected by --steps)"; fi

# ------------------------------------------------------------ 8. NCCL comm
ranked_tests() { # PREFIX: the name_npN tests of the build, else the four counts
  local names
  names=$(echo "$gpu_tests" | grep -E "^$1_np[0-9]+\$" | sort -V)
  [ -n "$names" ] || names=$(printf "$1_np%s\n" 1 2 4 8)
  echo "$names"
}
section "NCCL comm at 1/2/4/8 ranks"
if want 8 nccl; then
  for t in $(ranked_tests test_comm_nccl); do
    gpu_ctest nccl "$t" "collectives, batches, split, peer timeout" "${t##*_np}"
  done
else out "(not selected by --steps)"; fi

# ------------------------------------------------------------ 9. stages
section "Stages oracle on GPUs"
if want 9 stages; then
  for t in $(ranked_tests test_gpu_stages); do
    n=${t##*_np}
    gpu_ctest stages "$t" "$([ "$n" = 1 ] && echo "bitwise equal to stage 0" ||
      echo "within 1e-6 relative L2 of stage 0, 1e-5 of one rank")" "$n"
  done
else out "(not selected by --steps)"; fi

# ------------------------------------------------------------ 10. mlp
# The example trainer with each offload config, on the GPU (CUDA build) and
# on the CPU (CPU build), same seed and data, 200 steps, fp32: the final
# loss must agree within a summation-order bound (cuBLAS against loops),
# |loss_gpu - loss_cpu| <= 2e-3 + 2e-2 * loss_cpu, and the final weights
# (each run's checkpoint exported by zinc-ckpt as f32) within 5e-2
# relative L2 (both figures are printed: a first run shows how close).
section "examples/mlp on the GPU against the CPU build"
mlp_last() { sed -n 's/^step *\([0-9]*\) | loss \([0-9.eE+-]*\) | accuracy *\([0-9.]*\)%.*/\1 \2 \3/p' "$1" | tail -1; }
# weights_diff A.safetensors B.safetensors -> "relative L2, max abs"
weights_diff() {
  python3 - "$1" "$2" <<'PY'
import json, math, struct, sys
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = struct.unpack("<%df" % ((b - a) // 4), data[a:b])
    return out
x, y = load(sys.argv[1]), load(sys.argv[2])
if sorted(x) != sorted(y):
    print("nan nan"); sys.exit()
num = den = mx = 0.0
for k in x:
    for p, q in zip(x[k], y[k]):
        num += (p - q) ** 2; den += q * q; mx = max(mx, abs(p - q))
print("%.3e %.3e" % (math.sqrt(num / den) if den else float("nan"), mx))
PY
}
if want 10 mlp; then
  if reason=$(need_gpus 1); then
    np=1; [ "$gpus" -ge 2 ] && np=2
    ckpt=$cpu_build/tools/zinc-ckpt/zinc-ckpt
    for cfg in zero3.json zero3_offload_cpu.json zero3_offload_nvme.json; do
      name=mlp_${cfg%.json}
      rm -rf "$logs/${name}_gpu.ckpt" "$logs/${name}_cpu.ckpt"
      run "${name}_gpu" 900 mpirun -n $np "$cuda_build/examples/mlp/mlp" "examples/configs/$cfg" 200 \
        "$logs/${name}_gpu.ckpt"
      rc_gpu=$?; log_gpu=$last_log
      run "${name}_cpu" 900 mpirun -n $np "$cpu_build/examples/mlp/mlp" "examples/configs/$cfg" 200 \
        "$logs/${name}_cpu.ckpt"
      rc_cpu=$?; log_cpu=$last_log
      if [ $dry = 1 ]; then record "WOULD RUN" mlp "$cfg, $np rank(s)" "final loss and weights, GPU vs CPU"; continue; fi
      read -r s_gpu l_gpu a_gpu <<<"$(mlp_last "$log_gpu")"
      read -r s_cpu l_cpu a_cpu <<<"$(mlp_last "$log_cpu")"
      wdiff="nan nan"
      if "$ckpt" export "$logs/${name}_gpu.ckpt" final "$logs/${name}_gpu.safetensors" --dtype f32 \
           >/dev/null 2>&1 &&
         "$ckpt" export "$logs/${name}_cpu.ckpt" final "$logs/${name}_cpu.safetensors" --dtype f32 \
           >/dev/null 2>&1; then
        wdiff=$(weights_diff "$logs/${name}_gpu.safetensors" "$logs/${name}_cpu.safetensors")
      fi
      read -r w_rel w_max <<<"$wdiff"
      detail="$np rank(s), step ${s_gpu:-?}: loss GPU ${l_gpu:-?} / CPU ${l_cpu:-?}, accuracy GPU ${a_gpu:-?}% / CPU ${a_cpu:-?}%, weights relative L2 $w_rel (max abs $w_max)"
      if [ $rc_gpu != 0 ] || [ $rc_cpu != 0 ] || [ -z "${l_gpu:-}" ] || [ -z "${l_cpu:-}" ]; then
        record FAIL mlp "$cfg" "exit GPU $rc_gpu / CPU $rc_cpu; $detail"
      elif ! awk -v g="$l_gpu" -v c="$l_cpu" 'BEGIN{d=g-c; if (d<0) d=-d; exit !(d <= 2e-3 + 2e-2*c)}'; then
        record FAIL mlp "$cfg" "$detail: loss beyond 2e-3 + 2e-2 * CPU loss"
      elif ! awk -v w="$w_rel" 'BEGIN{exit !(w + 0 == w && w <= 5e-2)}'; then
        record FAIL mlp "$cfg" "$detail: weights beyond 5e-2 relative L2 (or no checkpoint to compare)"
      else
        record PASS mlp "$cfg" "$detail (bounds: loss 2e-3 + 2e-2 * CPU loss, weights 5e-2)"
      fi
      grep -q 'on the device' "$log_gpu" && out "GPU run: $(grep -m1 'model states' "$log_gpu")"
    done
  else
    for cfg in zero3.json zero3_offload_cpu.json zero3_offload_nvme.json; do
      record SKIPPED mlp "$cfg" "$reason"
    done
  fi
else out "(not selected by --steps)"; fi

# ------------------------------------------------------------ 11. kill
# mlp under `mpirun --enable-recovery` with comm_timeout_s 5; once it
# trains, the last rank is SIGKILLed. Every other rank must exit non-zero
# with an error naming that rank, and mpirun must return within 5 + 10 s
# of the kill (no hang).
section "A rank killed mid-step"
kill_check() {
  local np=$1 victim=$(($1 - 1)) dir=$logs/kill
  rm -rf "$dir"; mkdir -p "$dir"
  python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
c.setdefault("zinc", {})["comm_timeout_s"] = 5
c["steps_per_print"] = 1
json.dump(c, open(sys.argv[2], "w"), indent=1)' examples/configs/zero2.json "$dir/config.json"
  # each rank records its trainer's pid (so that exactly the victim is
  # killed) and the trainer's exit status
  cat >"$dir/rank.sh" <<EOF
#!/usr/bin/env bash
r=\${OMPI_COMM_WORLD_RANK:-\${PMI_RANK:-0}}
"$root/$cuda_build/examples/mlp/mlp" "$dir/config.json" 1000000 >"$dir/rank\$r.log" 2>&1 &
echo \$! >"$dir/pid.\$r"
wait \$!
echo \$? >"$dir/rc.\$r"
EOF
  chmod +x "$dir/rank.sh"
  out ""; out '```sh'
  out "$ mpirun -n $np --enable-recovery $dir/rank.sh   # mlp $dir/config.json (zero2.json + comm_timeout_s 5)"
  out "$ kill -KILL <pid of rank $victim>   # once rank 0 printed step 20"
  out '```'
  if [ $dry = 1 ]; then record "WOULD RUN" kill "rank $victim of $np SIGKILLed" ""; return; fi
  timeout 300 mpirun -n "$np" --enable-recovery "$dir/rank.sh" >"$dir/mpirun.log" 2>&1 &
  local launcher=$! i
  for i in $(seq 600); do
    grep -qE '^step +20 ' "$dir/rank0.log" 2>/dev/null && break
    kill -0 $launcher 2>/dev/null || break
    sleep 0.1
  done
  if ! grep -qE '^step +20 ' "$dir/rank0.log" 2>/dev/null || [ ! -s "$dir/pid.$victim" ]; then
    kill $launcher 2>/dev/null; wait $launcher
    record FAIL kill "rank $victim of $np" "the run never reached step 20 (see $dir)"
    return
  fi
  local t0 pid; pid=$(cat "$dir/pid.$victim"); t0=$(date +%s.%N)
  kill -KILL "$pid"
  wait $launcher
  local mpirun_rc=$? elapsed
  elapsed=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  out "mpirun returned $mpirun_rc $elapsed s after the kill"
  local r bad=0
  for r in $(seq 0 $((np - 2))); do
    out "rank $r: exit status $(cat "$dir/rc.$r" 2>/dev/null || echo '(none: did not exit)'):" \
      "\`$(grep -m1 -oE 'mlp: .*failed.*' "$dir/rank$r.log" | head -c 400)\`"
    [ "$(cat "$dir/rc.$r" 2>/dev/null || echo 0)" != 0 ] || bad=1
    grep -E 'mlp: .*failed' "$dir/rank$r.log" |
      grep -qE "rank(\(s\))? ([0-9]+,)*$victim([^0-9,]|$)" || bad=1
  done
  if [ $bad = 0 ] && awk -v e="$elapsed" 'BEGIN{exit !(e <= 15)}'; then
    record PASS kill "rank $victim of $np SIGKILLed" "every other rank exited non-zero with an error naming rank $victim; mpirun returned $elapsed s after the kill (limit 15 s)"
  else
    record FAIL kill "rank $victim of $np SIGKILLed" "not every other rank exited non-zero naming rank $victim, or mpirun returned only $elapsed s after the kill (limit 15 s); logs in $dir"
  fi
}
if want 11 kill; then
  if reason=$(need_gpus 2); then
    kill_check "$([ "$gpus" -ge 4 ] && echo 4 || echo 2)"
  else record SKIPPED kill "rank killed mid-step" "$reason"; fi
else out "(not selected by --steps)"; fi

# ------------------------------------------------------------ 12. ctest -L gpu
section "ctest -L gpu (every other GPU test)"
if want 12 ctest; then
  done_re=$(printf '%s\n' $kernel_tests test_cuda_errors test_cuda_pool |
    sed 's/.*/^&$/' | paste -sd '|')
  done_re="$done_re|^test_comm_nccl_np[0-9]+\$|^test_gpu_stages_np[0-9]+\$"
  rest=$(echo "$gpu_tests" | grep -vE "$done_re")
  if [ -z "$(echo "$rest" | tr -d '[:space:]')" ] && [ $dry = 0 ]; then
    record PASS ctest "ctest -L gpu" "no other gpu-labelled tests"
  elif reason=$(need_gpus 1); then
    run ctest_gpu_rest 3600 ctest --test-dir "$cuda_build" -L gpu -E "$done_re" --output-on-failure
    rc=$?
    record "$(verdict $rc)" ctest "ctest -L gpu -E <the tests above>" \
      "$([ $dry = 0 ] && grep -m1 'tests passed' "$last_log") ($(echo $rest | wc -w) tests: $(echo $rest))"
  else record SKIPPED ctest "ctest -L gpu (the rest: $(echo $rest))" "$reason"; fi
else out "(not selected by --steps)"; fi

# ------------------------------------------------------------ summary
failed=0 skipped=0 passed=0
out ""; out "## Summary"; out ""
out "| status | step | check | detail |"; out "| --- | --- | --- | --- |"
for c in "${checks[@]}"; do
  IFS='|' read -r st sp ch de <<<"$c"
  out "| $st | $sp | $ch | $de |"
  case $st in FAIL) failed=$((failed + 1)) ;; SKIPPED) skipped=$((skipped + 1)) ;; PASS) passed=$((passed + 1)) ;; esac
done
out ""
line="$passed passed, $failed failed, $skipped skipped"
[ "$gpus" = 0 ] && line="$line — NO GPU: every GPU step was SKIPPED"
[ $dry = 1 ] && line="$line (dry run)"
say "**Result: $line**"
echo "report: $report"
[ $failed = 0 ]
