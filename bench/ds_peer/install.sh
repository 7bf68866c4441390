#!/usr/bin/env bash
# Install the DeepSpeed peer's optional dependencies (bench/ds_peer/ds_peer.py):
# OpenBLAS for zinc's trainer (Debian's libopenblas0-pthread, opened at run
# time), and torch + DeepSpeed from PyPI in a venv (default bench/.dsvenv,
# git-ignored; or the first argument, or ZINC_DS_VENV). DeepSpeed's cpu ops
# (its CPU Adam, fused Adam and shared-memory comm) are compiled here once,
# by its JIT, so that no timed run waits for a compiler.
#
#   bash bench/ds_peer/install.sh [venv dir]
#
# Debian's libopenblas0 would also make OpenBLAS the system's libblas.so.3
# and liblapack.so.3; the previous choice of those alternatives is put back
# (ds_peer_zinc opens libopenblas.so.0 by name), so other programs keep
# the BLAS they had.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${1:-${ZINC_DS_VENV:-$root/bench/.dsvenv}}
TORCH_VERSION=${TORCH_VERSION:-2.15.0}
DEEPSPEED_VERSION=${DEEPSPEED_VERSION:-0.19.8}

if ! ldconfig -p | grep -q 'libopenblas\.so\.0'; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  blas_before=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null |
                sed -n 's/^Value: //p')
  lapack_before=$(update-alternatives --query liblapack.so.3-x86_64-linux-gnu 2>/dev/null |
                  sed -n 's/^Value: //p')
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends libopenblas0-pthread
  if [ -n "$blas_before" ]; then
    $SUDO update-alternatives --set libblas.so.3-x86_64-linux-gnu "$blas_before"
  fi
  if [ -n "$lapack_before" ]; then
    $SUDO update-alternatives --set liblapack.so.3-x86_64-linux-gnu "$lapack_before"
  fi
fi

[ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
# torch first: DeepSpeed's setup reads the installed torch
"$venv/bin/pip" install -q "torch==$TORCH_VERSION" ninja
"$venv/bin/pip" install -q --no-build-isolation "deepspeed==$DEEPSPEED_VERSION"

DS_ACCELERATOR=cpu "$venv/bin/python3" - <<'PY'
from deepspeed.accelerator import get_accelerator
acc = get_accelerator()
for name in ("ShareMemCommBuilder", "FusedAdamBuilder", "CPUAdamBuilder"):
    builder = acc.create_op_builder(name)
    builder.load()
    print("install: DeepSpeed op", builder.name, "built")
PY
echo "install: torch $TORCH_VERSION and DeepSpeed $DEEPSPEED_VERSION in $venv"
