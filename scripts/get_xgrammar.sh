#!/usr/bin/env bash
# Builds xgrammar (the grammar engine behind structured outputs, docs/structured_outputs.md) at a
# pinned version from its PyPI source package (Apache-2.0; the package carries the whole C++ library
# with its third-party headers, picojson and dlpack) as a static C++ library with the Python bindings
# switched off, and installs it into .third_party/xgrammar/ (git-ignored):
#   include/xgrammar/*.h, include/dlpack/dlpack.h, lib/libxgrammar.a, LICENSE, NOTICE, .version
# CMakeLists.txt links mpkv_grammar against it. Idempotent: does nothing when the folder already
# holds this version. scripts/setup.sh calls it before CMake.
# Usage: scripts/get_xgrammar.sh   Environment: XGRAMMAR_DIR (.third_party/xgrammar), JOBS (nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGE=xgrammar
VERSION=0.2.8
SHA256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
DEST=${XGRAMMAR_DIR:-.third_party/xgrammar}
STAMP="$DEST/.version"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PACKAGE-$VERSION" ] && [ -f "$DEST/lib/libxgrammar.a" ]; then exit 0; fi

PY=$(command -v python3 || command -v python) ||
  { echo "get_xgrammar: python3 is needed (pip downloads $PACKAGE; scripts/setup.sh installs it)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "get_xgrammar: downloading $PACKAGE==$VERSION (source package, 2.7 MB) from PyPI" >&2
# --no-binary names the package alone (with :all: pip would build its build requirements from source
# to read its metadata).
"$PY" -m pip download --quiet --no-deps --disable-pip-version-check --no-binary "$PACKAGE" \
  -d "$tmp" "$PACKAGE==$VERSION" >&2
tarball="$tmp/$PACKAGE-$VERSION.tar.gz"
[ -f "$tarball" ] || { echo "get_xgrammar: pip did not produce $(basename "$tarball") (got: $(ls "$tmp"))" >&2; exit 1; }
echo "$SHA256  $tarball" | sha256sum -c --status ||
  { echo "get_xgrammar: sha256 of $tarball is $(sha256sum "$tarball" | cut -d' ' -f1), expected $SHA256; nothing kept" >&2; exit 1; }
tar -xzf "$tarball" -C "$tmp"
src="$tmp/$PACKAGE-$VERSION"
[ -f "$src/CMakeLists.txt" ] && [ -f "$src/include/xgrammar/xgrammar.h" ] ||
  { echo "get_xgrammar: $tarball has no CMakeLists.txt or include/xgrammar" >&2; exit 1; }

# The package's cmake/config.cmake turns the Python bindings on; a config.cmake in the build folder
# takes precedence over it (xgrammar's CMakeLists.txt reads that one first).
mkdir -p "$tmp/build"
cat >"$tmp/build/config.cmake" <<'EOF'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_COVERAGE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
EOF
stage="$DEST.tmp.$$"
rm -rf "$stage"
# -fno-lto: xgrammar adds -flto=auto, whose objects would make every mpkv link an LTO link.
# -Wno-error: xgrammar builds with -Werror, and a newer compiler's new warning must not fail setup.
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
start=$(date +%s)
cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$(pwd)/$stage" -DCMAKE_INSTALL_LIBDIR=lib \
  -DCMAKE_CXX_FLAGS="-fno-lto -Wno-error" "${launcher[@]}" >"$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log" >&2; echo "get_xgrammar: configuring xgrammar failed" >&2; exit 1; }
echo "get_xgrammar: building the static library (about 10 minutes on 2 cores)" >&2
cmake --build "$tmp/build" -j "${JOBS:-$(nproc)}" --target xgrammar >"$tmp/build.log" 2>&1 ||
  { tail -50 "$tmp/build.log" >&2; echo "get_xgrammar: building xgrammar failed" >&2; exit 1; }
cmake --install "$tmp/build" >/dev/null
cp "$src/LICENSE" "$src/NOTICE" "$stage/"
[ -f "$stage/lib/libxgrammar.a" ] || { echo "get_xgrammar: the install has no lib/libxgrammar.a" >&2; exit 1; }
echo "$PACKAGE-$VERSION" >"$stage/.version"
mkdir -p "$(dirname "$DEST")"
rm -rf "$DEST" && mv "$stage" "$DEST"
echo "get_xgrammar: built $PACKAGE $VERSION into $DEST in $(( $(date +%s) - start )) s" >&2
