#!/usr/bin/env bash
# The README's main job: build zinc for the CPU and train the example GPT
# (examples/gpt) data-parallel under mpirun at ZeRO stage 3, with the
# progress line every few steps, a text sample and every rank's memory at
# the end.
#
# Knobs (environment):
#   RANKS=3                  ranks under mpirun (oversubscribed on small machines)
#   CONFIG=zero3.json        a file in examples/configs/ (zero0..3, *_offload_cpu,
#                            zero3_offload_nvme) or a path
#   STEPS=300                optimizer steps
#   BUILD=build/cpu          build directory
# Extra arguments go to the trainer (see examples/README.md: --layers,
# --width, --bf16, --data FILE, --ckpt-dir DIR, --resume, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${RANKS:-3}
config=${CONFIG:-zero3.json}
steps=${STEPS:-300}
build=${BUILD:-build/cpu}
[ -f "$config" ] || config=examples/configs/$config
[ -f "$config" ] || { echo "quickstart: no config $config" >&2; exit 2; }

if [ ! -x "$build/examples/gpt/gpt_train" ] || [ -n "$(find include engine optim config base offload examples/gpt -newer "$build/examples/gpt/gpt_train" -name '*.[ch]' 2>/dev/null | head -1)" ]; then
  echo "== building zinc (CPU) in $build"
  cmake -S . -B "$build" -DZINC_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j "$(nproc)" --target gpt_train >/dev/null
fi

if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
mkdir -p /tmp/zinc_nvme
echo "== mpirun -n $ranks gpt_train --config $config --steps $steps $*"
exec mpirun -n "$ranks" --oversubscribe "$build/examples/gpt/gpt_train" \
  --config "$config" --steps "$steps" "$@"
