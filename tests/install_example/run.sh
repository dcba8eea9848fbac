#!/bin/sh
# ctest install_example: install the build into BUILD/install-test, then build
# main.c against it with find_package(ingot) and with pkg-config, and run each.
# usage: run.sh BUILD_DIR [CMAKE] [CC]
set -eu
build=$1 cmake=${2:-cmake} cc=${3:-cc}
here=$(cd "$(dirname "$0")" && pwd)
prefix=$build/install-test work=$build/install-example
rm -rf "$prefix" "$work"

"$cmake" --install "$build" --prefix "$prefix" >/dev/null

echo "== find_package(ingot)"
"$cmake" -S "$here" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release >/dev/null
"$cmake" --build "$work/cmake"
"$work/cmake/example_shared"
"$work/cmake/example_static"

echo "== pkg-config"
pc=$(find "$prefix" -name ingot.pc | head -n 1)
export PKG_CONFIG_PATH="${pc%/*}"
libdir=$(pkg-config --variable=libdir ingot)
# shellcheck disable=SC2046  # word splitting of pkg-config output is intended
"$cc" -std=c11 "$here/main.c" -o "$work/pc_shared" \
  $(pkg-config --cflags --libs ingot) -Wl,-rpath,"$libdir"
"$work/pc_shared"
# -l:libingot.a forces the archive, so Libs.private must be complete.
# shellcheck disable=SC2046
"$cc" -std=c11 "$here/main.c" -o "$work/pc_static" \
  $(pkg-config --static --cflags --libs ingot | sed 's/-lingot\b/-l:libingot.a/')
"$work/pc_static"
