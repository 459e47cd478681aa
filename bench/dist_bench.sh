#!/usr/bin/env bash
# Distributed figures, each against its peer in the same run:
#  1. overlap: bench/ddp_overlap_bench on 2 processes;
#  2. scaling: the fashion_mnist example on 2 processes against 1 (one
#     intra-op thread each, batch 64 per process: the 2-process run takes
#     half the steps with twice the global batch, so its accuracy after one
#     epoch is lower; the figure is throughput).
# Usage: bash bench/dist_bench.sh [BUILD_DIR] [TRAIN_IMAGES]
set -euo pipefail
build="${1:-build}"
images="${2:-30000}"
source "$(dirname "$0")/launch.sh"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

echo "== overlap"
launch 2 "$build/bench/ddp_overlap_bench" 768 64 15

echo "== scaling (fashion_mnist, $images images, 1 epoch, batch 64 per process)"
fm="$build/examples/fashion_mnist/fashion_mnist"
"$fm" --threads 1 --epochs 1 --limit-train "$images" --limit-test 1000 \
  --batch-size 64 --output-dir "$out/one" >/dev/null 2>"$out/one.log"
launch 2 "$fm" --threads 1 --epochs 1 --limit-train "$images" --limit-test 1000 \
  --batch-size 64 --output-dir "$out/two" >/dev/null 2>"$out/two.log"
python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
one = json.load(open(f"{d}/one/summary.json"))
two = json.load(open(f"{d}/two/summary.json"))
print(f"  1 process : {one['samples_per_second']:8.0f} samples/s, accuracy {one['test_accuracy']:.4f}")
print(f"  2 processes: {two['samples_per_second']:8.0f} samples/s, accuracy {two['test_accuracy']:.4f}")
print(f"  scaling 2 vs 1: {two['samples_per_second'] / one['samples_per_second']:.2f}x (target >= 1.7x)")
PY
