#!/usr/bin/env bash
# The test command (README, CI). Builds and checks, in order:
#   1. the CPU build (-Werror) and its whole test suite, multi-rank tests under
#      mpirun with 1-4 ranks (a few with 6 and 8), the `cluster` tests on
#      emulated nodes (SKIPPED without root and network namespaces);
#   2. the CUDA build (-Werror): compile and link only here; its `gpu` tests
#      run when a GPU is present and say SKIPPED otherwise;
#   3. the AddressSanitizer + UBSan build and the suite under it (not the
#      tests labelled `slow`, which the CPU build runs, nor `wide`: each
#      multi-rank program runs at its smallest rank counts, the CPU build
#      at every count);
#   4. the ThreadSanitizer build and the threaded tests under it (not `slow`);
#   5. bounded libFuzzer runs of every parser of outside input;
#   6. valgrind memcheck on the single-process tests (the engine's own tests
#      run as one process without MPI, the unit tests).
# Environment: ZINC_TEST_ONLY=cpu|cuda|asan|tsan|fuzz|valgrind runs one part;
# JOBS=n sets build parallelism (default: number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=${JOBS:-$(nproc)}
only=${ZINC_TEST_ONLY:-all}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1

want() { [ "$only" = all ] || [ "$only" = "$1" ]; }
stamp() { echo; echo "=== $* ($(date +%H:%M:%S))"; }
t0=$(date +%s)

if want cpu; then
  stamp "1/6 CPU build"
  cmake -S . -B build/cpu -DZINC_CUDA=OFF -DZINC_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build/cpu -j "$jobs"
  stamp "1/6 CPU test suite"
  ctest --test-dir build/cpu --output-on-failure -j 2 -LE 'bench|tsan-only'
fi

if want cuda; then
  stamp "2/6 CUDA build (compile and link)"
  if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null; then
    cmake -S . -B build/cuda -DZINC_CUDA=ON -DZINC_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build build/cuda -j "$jobs"
    ctest --test-dir build/cuda --output-on-failure -L gpu || {
      echo "CUDA build: gpu tests failed"; exit 1; }
  else
    echo "SKIPPED: CUDA build — no nvcc on this machine (install the CUDA toolkit under /usr/local/cuda)"
  fi
fi

if want asan; then
  stamp "3/6 AddressSanitizer + UBSan build and suite"
  cmake -S . -B build/asan -DZINC_CUDA=OFF -DZINC_WERROR=ON -DZINC_SANITIZE=address,undefined \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZINC_BENCH=OFF >/dev/null
  cmake --build build/asan -j "$jobs"
  ctest --test-dir build/asan --output-on-failure -j 2 -LE 'bench|slow|tsan-only|wide'
fi

if want tsan; then
  stamp "4/6 ThreadSanitizer build and threaded tests"
  cmake -S . -B build/tsan -DZINC_CUDA=OFF -DZINC_WERROR=ON -DZINC_SANITIZE=thread \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZINC_BENCH=OFF -DZINC_EXAMPLES=OFF >/dev/null
  cmake --build build/tsan -j "$jobs"
  ctest --test-dir build/tsan --output-on-failure -L threads -LE slow
fi

if want fuzz; then
  stamp "5/6 bounded fuzzing"
  CC=clang cmake -S . -B build/fuzz -DZINC_CUDA=OFF -DZINC_FUZZ=ON -DZINC_TESTS=ON \
        -DZINC_EXAMPLES=OFF -DZINC_BENCH=OFF -DZINC_TOOLS=OFF >/dev/null
  cmake --build build/fuzz -j "$jobs"
  ctest --test-dir build/fuzz --output-on-failure -L fuzz
fi

if want valgrind; then
  stamp "6/6 valgrind memcheck, single-process tests"
  if ! command -v valgrind >/dev/null; then
    echo "SKIPPED: valgrind is not installed (scripts/setup.sh installs it)"
  else
    if [ ! -x build/cpu/tests/engine/test_stages ]; then
      cmake -S . -B build/cpu -DZINC_CUDA=OFF -DZINC_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
      cmake --build build/cpu -j "$jobs"
    fi
    export ZINC_TEST_BINARY_DIR="$root/build/cpu" ZINC_TEST_SOURCE_DIR="$root"
    # run directly (no mpirun): a lone process is a world of one without MPI
    # (test_rank_divergence is left out: alone it has nothing to check and exits 77)
    for t in engine/test_stages engine/test_fp16_overflow engine/memory/test_model_state_bytes \
             engine/test_stage3_max_live engine/test_api_misuse engine/test_layout base/test_base \
             config/test_config_corpus config/test_config_batch config/test_config_warnings \
             config/test_config_roundtrip optim/test_lr_schedule optim/test_loss_scaler \
             base/test_threadpool optim/test_adam_reference kernels/test_cpu_sumsq \
             device/test_device_cpu device/test_topology offload/test_aio_engine \
             offload/test_aio_faults offload/test_swap offload/test_swap_faults \
             examples/test_gpt_data; do
      start=$(date +%s)
      if ! valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
           "build/cpu/tests/$t" >"build/cpu/valgrind-$(basename "$t").log" 2>&1; then
        cat "build/cpu/valgrind-$(basename "$t").log"
        echo "valgrind: $t FAILED"; exit 1
      fi
      echo "valgrind: $t clean ($(( $(date +%s) - start )) s)"
    done
  fi
fi

echo
echo "=== all requested parts passed in $(( $(date +%s) - t0 )) s"
