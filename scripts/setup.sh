#!/usr/bin/env bash
# Installs what ampkit needs (Debian's packages, only what is missing; for the
# CUDA flavour also PyTorch's torch wheel into a virtual environment),
# configures and builds with ccache and the precompiled header, then runs
# the demo or the tests.
#
#   bash scripts/setup.sh demo        # install, build, train Fashion-MNIST
#   bash scripts/setup.sh test        # install, build, run every CTest test
#   bash scripts/setup.sh build       # install and build only
#   bash scripts/setup.sh test-cuda   # on LibTorch 2.11 with CUDA 13 and
#                                     # NCCL, the tests whose outcome can
#                                     # differ between versions (label
#                                     # both; GPU tests skip themselves
#                                     # without a GPU)
#   bash scripts/setup.sh build-cuda  # install and build that flavour only
#
# The first three use Debian's LibTorch 1.13 (CPU) in build/; the CUDA
# flavour uses torch==2.11.0 from PyPI, in
# ${XDG_CACHE_HOME:-~/.cache}/ampkit/torch-2.11.0, and builds in build-cuda/.
set -euo pipefail

mode="${1:-build}"
case "$mode" in
  demo|test|build|test-cuda|build-cuda) ;;
  *) echo "usage: $0 demo|test|build|test-cuda|build-cuda (got '$mode')" >&2
     exit 2 ;;
esac
cuda=false
case "$mode" in *-cuda) cuda=true ;; esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
torch_version=2.11.0
if $cuda; then
  build="${AMPKIT_CUDA_BUILD_DIR:-$root/build-cuda}"
else
  build="${AMPKIT_BUILD_DIR:-$root/build}"
fi

# DESIGN.md's dependencies. libopenblas0-openmp matters: without it LibTorch
# falls back to the reference BLAS (fp32 matmul ~12x slower). bible-kjv
# prints the text examples/gpt trains on.
packages=(
  g++ cmake ninja-build ccache
  libtorch-dev libgloo-dev libopenblas0-openmp
  dataset-fashion-mnist bible-kjv
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
)
# The tests also check the golden headers against Python torch, list the
# distributed tests' sockets with ss (iproute2), render a report in
# headless Chromium (that test skips itself without it) and check the
# formatting (clang-format).
case "$mode" in
  test|test-cuda) packages+=(python3-torch python3-numpy chromium iproute2
    clang-format) ;;
esac
# The cross-checks against the real accelerate (tests/crosscheck) need a
# venv over Debian's torch 1.13 with accelerate 1.2.1, the newest that
# takes it.
if [ "$mode" = test ]; then
  packages+=(python3-venv)
fi
# The CUDA flavour's torch wheel goes into a virtual environment (its
# c10d headers include Gloo's, which the wheel leaves out: libgloo-dev).
if $cuda; then
  packages+=(python3-venv)
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

# A full disk fails the build in its middle ("cannot write PCH file: No
# space left on device"); say so first, with what is needed. A flavour's
# build folder takes about 2.5 GB, its new ccache objects up to 1.5 GB, and
# the CUDA flavour's torch wheel about 5 GB the first time.
need_gb=4
if $cuda && [ ! -x "${XDG_CACHE_HOME:-$HOME/.cache}/ampkit/torch-$torch_version/bin/python" ]; then
  need_gb=10
fi
mkdir -p "$build"
free_kb="$(df -Pk "$build" | awk 'NR == 2 { print $4 }')"
if [ -n "$free_kb" ] && [ "$free_kb" -lt $((need_gb * 1024 * 1024)) ]; then
  echo "setup: only $((free_kb / 1024)) MB are free on the disk of $build;" \
    "setup.sh $mode needs about $need_gb GB. Free space (old" \
    "build folders or clones, 'ccache -C' for the compiler cache in" \
    "${CCACHE_DIR:-$HOME/.cache/ccache}) and run this again." >&2
  exit 1
fi

jobs="$(nproc)"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
# Both flavours' objects and precompiled headers (about 700 MB each, cached
# too) overflow ccache's default 5 GB: its cleanups then evicted objects of
# the commit being built, and a warm CI took 25 minutes instead of 14.
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-15G}"
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo)

if $cuda; then
  # PyTorch's CMake config needs the CUDA toolkit (nvcc, cuBLAS, ...) to
  # configure; nothing here needs a GPU.
  if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
  if ! command -v nvcc >/dev/null; then
    echo "setup: $mode needs the CUDA 13 toolkit (nvcc on PATH or in" \
      "/usr/local/cuda/bin), which PyTorch's CMake config looks for; install" \
      "NVIDIA's cuda-toolkit-13-0, or use 'test' for the CPU build." >&2
    exit 1
  fi
  venv="${XDG_CACHE_HOME:-$HOME/.cache}/ampkit/torch-$torch_version"
  if ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" 2>/dev/null; then
    echo "setup: installing torch==$torch_version (CUDA 13.0 build, PyPI) into $venv"
    /usr/bin/python3 -m venv "$venv"
    # numpy: the golden generators and the GPU check's Python peer use it.
    "$venv/bin/pip" install -q --disable-pip-version-check \
      "torch==$torch_version" numpy
  fi
  # The folder holding lib/ and share/cmake: put first, so that CMake takes
  # this LibTorch's libtorch.so rather than Debian's.
  torch_root="$("$venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
  cmake_args+=(-DCMAKE_PREFIX_PATH="$torch_root"
    -DAMPKIT_TORCH_PYTHON="$venv/bin/python")
  # test-cuda builds only what `ctest -L both` runs: no benchmarks, no test
  # program that is version-blind (those ran in the 1.13 flavour), which
  # saves minutes of a cold CI. build-cuda (and the GPU bundle) builds all.
  if [ "$mode" = test-cuda ]; then
    cmake_args+=(-DAMPKIT_BUILD_BENCHMARKS=OFF -DAMPKIT_ONLY_BOTH_TESTS=ON)
  else
    cmake_args+=(-DAMPKIT_BUILD_BENCHMARKS=ON -DAMPKIT_ONLY_BOTH_TESTS=OFF)
  fi
fi

if [ "$mode" = test ]; then
  peer="${XDG_CACHE_HOME:-$HOME/.cache}/ampkit/peer-1.13"
  if ! "$peer/bin/python" -c "import accelerate, sys; sys.exit(accelerate.__version__ != '1.2.1')" 2>/dev/null; then
    echo "setup: installing accelerate==1.2.1 (PyPI) into $peer, over Debian's torch"
    rm -rf "$peer"
    /usr/bin/python3 -m venv --system-site-packages "$peer"
    "$peer/bin/pip" install -q --disable-pip-version-check "accelerate==1.2.1"
  fi
fi

cmake -S "$root" -B "$build" "${cmake_args[@]}"
if [ "$mode" = demo ]; then
  # The demo needs the library and the example, nothing else (not the CLI,
  # built after the demo has run, nor the test and benchmark targets).
  cmake --build "$build" -j "$jobs" --target fashion_mnist
else
  cmake --build "$build" -j "$jobs"
fi

case "$mode" in
  demo)
    "$build/examples/fashion_mnist/fashion_mnist" --threads "$jobs"
    # `ampkit report <output-dir>` turns the run into one HTML page.
    cmake --build "$build" -j "$jobs" --target ampkit_cli
    ;;
  test)
    # Unit, dist and slow tests run; gpu tests skip themselves without CUDA.
    ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 900
    ;;
  test-cuda)
    # What can differ between LibTorch versions (label both, see
    # tests/CMakeLists.txt); the version-blind rest ran in the 1.13 flavour.
    ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 900 \
      -L both
    ;;
esac
