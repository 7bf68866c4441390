#!/usr/bin/env bash
# Install zinc into a temporary prefix, then build and run a trainer outside
# the tree against it: with CMake's find_package(zinc), with pkg-config, and
# with pkg-config --static against libzinc.a. A trainer includes zinc.h
# alone, so what the install hands it must be enough and no more:
#  - `pkg-config --cflags zinc` is zinc's include directory only (zinc.h
#    has no MPI type: Open MPI's include paths have no business there);
#  - a program linked with `pkg-config --libs zinc` runs without
#    LD_LIBRARY_PATH (the .pc carries an rpath to zinc's libdir), and so
#    does the CMake consumer;
#  - the installed tools run without LD_LIBRARY_PATH too, and keep the
#    run path to every library directory outside the loader's defaults
#    that they were built against (MPI's, when it lives in a directory of
#    its own): CMake drops the build tree's run path at install.
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

# installed tools: the directories the build tree's copy finds its
# libraries in (its RUNPATH, less the build and source trees) must all be
# in the installed copy's
runpath() { readelf -d "$1" | sed -n 's/.*Library \(run\|r\)path: \[\(.*\)\]/\2/p' | tr ':' ' '; }
ntools=0
for tool in "$work"/prefix/bin/zinc-*; do
  [ -e "$tool" ] || continue
  name=$(basename "$tool")
  built=$(find "$build/tools" -type f -name "$name" -perm -u+x | head -1)
  [ -n "$built" ] || fail "no build-tree copy of the installed $name under $build/tools"
  installed_rp=" $(runpath "$tool") "
  shown=$(runpath "$tool")
  for dir in $(runpath "$built"); do
    case "$dir" in "$build"* | "$src"*) continue ;; esac
    [ "${installed_rp#* "$dir" }" != "$installed_rp" ] ||
      fail "the installed $name has run path \"${shown:-none}\": it lacks $dir, where its build-tree copy finds a library"
  done
  ntools=$((ntools + 1))
done
if [ -x "$work/prefix/bin/zinc-mem" ]; then
  "$work/prefix/bin/zinc-mem" estimate --params 1000000 >/dev/null ||
    fail "the installed zinc-mem does not run without LD_LIBRARY_PATH"
fi

# static: libzinc.a and what `pkg-config --static` adds for it
static_libs=$(pkg-config --static --libs zinc | sed 's/-lzinc\b/-l:libzinc.a/')
cc "$src/tests/install/consumer/consumer.c" -o "$work/consumer-static" $cflags $static_libs
if ldd "$work/consumer-static" | grep -q 'libzinc\.so'; then
  fail "the static consumer links libzinc.so ($static_libs)"
fi
"$work/consumer-static" || fail "the static consumer did not run ($static_libs)"
rm -rf "$work"
echo "install: find_package(zinc), pkg-config and pkg-config --static consumers built and ran; $ntools installed tools keep their run paths"
