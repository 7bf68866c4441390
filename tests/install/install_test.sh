#!/usr/bin/env bash
# Install zinc into a temporary prefix, then build and run a trainer outside
# the tree against it: with CMake's find_package(zinc), with pkg-config, and
# with pkg-config --static against libzinc.a. A trainer includes zinc.h
# alone, so what the install hands it must be enough and no more:
#  - `pkg-config --cflags zinc` is zinc's include directory only (zinc.h
#    has no MPI type: Open MPI's include paths have no business there);
#  - a program linked with `pkg-config --libs zinc` runs without
#    LD_LIBRARY_PATH (the .pc carries an rpath to zinc's libdir), and so
#    does the CMake consumer.
# usage: install_test.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
libdir=$(ls -d "$work"/prefix/lib*/ | head -1)
libdir=${libdir%/}
unset LD_LIBRARY_PATH # every program below must find libzinc.so by itself
fail() { echo "install: FAIL: $*" >&2; exit 1; }

cmake -S "$src/tests/install/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/consumer" || fail "the find_package(zinc) consumer did not run"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
cflags=$(pkg-config --cflags zinc)
for flag in $cflags; do
  [ "${flag#-I}" != "$flag" ] && [ "$(realpath -m "${flag#-I}")" = "$work/prefix/include" ] ||
    fail "pkg-config --cflags zinc gives \"$flag\" (all: \"$cflags\"): a trainer needs only -I$work/prefix/include"
done
libs=$(pkg-config --libs zinc)
cc "$src/tests/install/consumer/consumer.c" -o "$work/consumer-pc" $cflags $libs
"$work/consumer-pc" ||
  fail "a program built with \`pkg-config --cflags --libs zinc\` ($cflags $libs) does not run without LD_LIBRARY_PATH"

# static: libzinc.a and what `pkg-config --static` adds for it
static_libs=$(pkg-config --static --libs zinc | sed 's/-lzinc\b/-l:libzinc.a/')
cc "$src/tests/install/consumer/consumer.c" -o "$work/consumer-static" $cflags $static_libs
if ldd "$work/consumer-static" | grep -q 'libzinc\.so'; then
  fail "the static consumer links libzinc.so ($static_libs)"
fi
"$work/consumer-static" || fail "the static consumer did not run ($static_libs)"
rm -rf "$work"
echo "install: find_package(zinc), pkg-config and pkg-config --static consumers built and ran"
