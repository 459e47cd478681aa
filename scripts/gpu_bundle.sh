#!/usr/bin/env bash
# Builds ampkit against LibTorch 2.11 + CUDA 13 (setup.sh build-cuda) and packs
# what the GPU check needs into DIR (at most 60 MiB): the GPU test programs,
# ampkit, the two examples, libampkit and its non-LibTorch libraries, the
# data, the Python autocast generator and GPT peer, and run.sh.
#
#   bash scripts/gpu_bundle.sh DIR
#   # then, on a machine with an NVIDIA GPU and Python torch 2.11:
#   bash DIR/run.sh        # writes DIR/results.json; exits 2 without a GPU
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 DIR (the folder to write the GPU check bundle into)" >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$1"
if [ -e "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ] && [ ! -f "$dir/run.sh" ]; then
  echo "gpu_bundle: $dir exists and is not a GPU check bundle; give an empty or new folder" >&2
  exit 2
fi
build="${AMPKIT_CUDA_BUILD_DIR:-$root/build-cuda}"
AMPKIT_CUDA_BUILD_DIR="$build" bash "$root/scripts/setup.sh" build-cuda

rm -rf "$dir" && mkdir -p "$dir"/{bin,lib/fallback,data/fashion-mnist,python/tests/amp,python/bench}
dir="$(cd "$dir" && pwd)"
for p in tests/amp_gpu_tests tests/accelerator_gpu_tests tests/diag_gpu_tests \
    tools/ampkit/ampkit examples/fashion_mnist/fashion_mnist examples/gpt/gpt; do
  strip -o "$dir/bin/$(basename "$p")" "$build/$p"
done
strip -o "$dir/lib/libampkit.so" "$(readlink -f "$build/src/libampkit.so")"
(cd "$dir/lib" && soname="$(objdump -p libampkit.so | awk '/SONAME/{print $2}')" &&
  if [ -n "$soname" ] && [ "$soname" != libampkit.so ]; then ln -sf libampkit.so "$soname"; fi)
# ampkit's own dependencies that the GPU machine's Python torch does not
# bring: an allow-list (yaml-cpp, zlib; libstdc++/libgcc_s as a fallback for
# older systems). Everything else (LibTorch, CUDA, NCCL, glibc) comes from
# there; ldd.txt records what each program links here.
for b in "$dir"/bin/* "$dir/lib/libampkit.so"; do
  echo "== ${b#"$dir"/}"
  LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$b"
done > "$dir/ldd.txt"
awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' "$dir/ldd.txt" | sort -u |
  while read -r name path; do
    case "$name" in
      libyaml-cpp.so*|libz.so*) cp -L "$path" "$dir/lib/$name" ;;
      libstdc++.so*|libgcc_s.so*) cp -L "$path" "$dir/lib/fallback/$name" ;;
    esac
  done
cp /usr/share/datasets/fashion-mnist/*.gz "$dir/data/fashion-mnist/"
gzip -9 -c "$build/examples/gpt/kjv.txt" > "$dir/data/kjv.txt.gz"
cp "$root/tests/amp/generate_golden.py" "$dir/python/tests/amp/"
cp "$root/tests/golden_common.py" "$dir/python/tests/"
cp "$root/bench/gpt_peer.py" "$dir/python/bench/"
cp "$root/scripts/gpu_check/run.sh" "$root/scripts/gpu_check/summarize.py" "$dir/"
# The LibTorch built against: the Python torch that setup.sh installed.
torch_python="$(sed -n 's/^AMPKIT_TORCH_PYTHON:[A-Z]*=//p' "$build/CMakeCache.txt")"
"$torch_python" -c 'import torch; print(torch.__version__)' > "$dir/TORCH_VERSION"
(cd "$root" && git describe --always --dirty 2>/dev/null || echo unknown) > "$dir/COMMIT"

size_kib="$(du -sk "$dir" | cut -f1)"
limit_kib=$((60 * 1024))
echo "gpu_bundle: $dir: $((size_kib / 1024)) MiB (LibTorch $(cat "$dir/TORCH_VERSION"), commit $(cat "$dir/COMMIT"))"
if [ "$size_kib" -gt "$limit_kib" ]; then
  echo "gpu_bundle: the bundle is over 60 MiB" >&2
  du -sk "$dir"/*/* | sort -n | tail -5 >&2
  exit 1
fi
echo "gpu_bundle: on a machine with an NVIDIA GPU and Python torch 2.11: bash $dir/run.sh"
