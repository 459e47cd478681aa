#!/usr/bin/env bash
# Installs what ampkit needs from Debian's packages (only what is missing),
# configures and builds with ccache and the precompiled header, then runs
# the demo or the tests.
#
#   bash scripts/setup.sh demo    # install, build, train Fashion-MNIST
#   bash scripts/setup.sh test    # install, build, run every CTest test
#   bash scripts/setup.sh build   # install and build only
set -euo pipefail

mode="${1:-build}"
case "$mode" in
  demo|test|build) ;;
  *) echo "usage: $0 demo|test|build (got '$mode')" >&2; exit 2 ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${AMPKIT_BUILD_DIR:-$root/build}"

# DESIGN.md's dependencies. libopenblas0-openmp matters: without it LibTorch
# falls back to the reference BLAS (fp32 matmul ~12x slower).
packages=(
  g++ cmake ninja-build ccache
  libtorch-dev libgloo-dev libopenblas0-openmp
  dataset-fashion-mnist
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libfmt-dev zlib1g-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
)
# The tests also check the golden headers against Python torch, list the
# distributed tests' sockets with ss (iproute2), and render a
# report in headless Chromium (that test skips itself without it).
if [ "$mode" = test ]; then
  packages+=(python3-torch python3-numpy chromium iproute2)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then
      sudo=(sudo)
    else
      echo "setup: need root to run: apt-get install ${missing[*]}" >&2
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -q
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

jobs="$(nproc)"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$jobs"

case "$mode" in
  demo)
    "$build/examples/fashion_mnist/fashion_mnist" --threads "$jobs"
    ;;
  test)
    # Unit, dist and slow tests run; gpu tests skip themselves without CUDA.
    ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 900
    ;;
esac
