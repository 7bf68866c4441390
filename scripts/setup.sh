#!/usr/bin/env bash
# Install everything zinc needs to build, test and run on Debian 12, from
# Debian's own packages. Safe to run again: apt skips what is installed.
#
# The CUDA toolkit and NCCL are not Debian packages; when /usr/local/cuda
# holds them the CUDA build is compiled too (see README).
set -euo pipefail

packages=(
  build-essential cmake pkg-config git          # toolchain
  liburing-dev libhwloc-dev libjansson-dev      # io_uring, topology, JSON
  libcmocka-dev                                 # unit tests
  libopenmpi-dev openmpi-bin                    # launcher, CPU collectives
  clang libclang-rt-14-dev                      # libFuzzer, sanitizer runtimes
  fio                                           # the aio benchmark's peer
  valgrind                                      # memcheck part of the test command
  python3 python3-venv                          # test readers; the Hjson reference (.venv)
  iproute2 util-linux                           # ip, tc, unshare: the emulated cluster (tests/cluster)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
else
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The reference Hjson reader (PyPI hjson 3.1.0, pure Python) for the
# differential test of config/hjson.c, in .venv beside the sources.
root=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -x "$root/.venv/bin/python3" ] || ! "$root/.venv/bin/python3" -c "import hjson" 2>/dev/null; then
  if /usr/bin/python3 -m venv "$root/.venv" && "$root/.venv/bin/pip" install -q hjson==3.1.0; then
    echo "setup: hjson 3.1.0 installed in .venv (the Hjson reference test)"
  else
    echo "setup: could not install hjson from PyPI: the Hjson reference test will say SKIPPED"
  fi
fi

# Python's safetensors (PyPI, pinned) for tests/engine/checkpoint/
# make_pretrained.py, which writes the committed fixtures that
# test_load_weights reads (the test itself needs no PyPI package).
if [ -x "$root/.venv/bin/python3" ] && ! "$root/.venv/bin/python3" -c "import safetensors" 2>/dev/null; then
  if "$root/.venv/bin/pip" install -q safetensors==0.8.0; then
    echo "setup: safetensors 0.8.0 installed in .venv (the pretrained-weights fixtures' writer)"
  else
    echo "setup: could not install safetensors from PyPI: make_pretrained.py cannot regenerate the fixtures"
  fi
fi

# TensorBoard's own event reader (PyPI tensorboard) reads back the event
# files zinc's tensorboard monitor writes (tests/engine/tb_read.py).
if [ -x "$root/.venv/bin/python3" ] && ! "$root/.venv/bin/python3" -c "import tensorboard" 2>/dev/null; then
  if "$root/.venv/bin/pip" install -q tensorboard; then
    echo "setup: tensorboard installed in .venv (the TensorBoard read-back test)"
  else
    echo "setup: could not install tensorboard from PyPI: tensorboard_reads_* will say SKIPPED"
  fi
fi

if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found: $(/usr/local/cuda/bin/nvcc --version | tail -1)"
else
  echo "setup: no CUDA toolkit under /usr/local/cuda: only the CPU build will be made"
fi
