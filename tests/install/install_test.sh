#!/usr/bin/env bash
# Install zinc into a temporary prefix, then build and run a trainer outside
# the tree against it twice: with CMake's find_package(zinc) and with
# pkg-config.  usage: install_test.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
libdir=$(ls -d "$work"/prefix/lib*/ | head -1)
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cmake -S "$src/tests/install/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/consumer"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc "$src/tests/install/consumer/consumer.c" -o "$work/consumer-pc" $(pkg-config --cflags --libs zinc)
"$work/consumer-pc"
rm -rf "$work"
echo "install: find_package(zinc) and pkg-config consumers built and ran"
