#!/usr/bin/env bash
# Distributed figures, each against its peer in the same run:
#  1. overlap: bench/ddp_overlap_bench on 2 processes;
#  2. scaling: the fashion_mnist example on 2 processes against 1 (one
#     intra-op thread each, batch 64 per process: the 2-process run takes
#     half the steps with twice the global batch, so its accuracy after one
#     epoch is lower; the figure is throughput);
#  3. DDP options: the same 2-process run with gradient_as_bucket_view off
#     (PyTorch's and accelerate's default), on (the examples' default), and
#     on with static_graph, alternating, ROUNDS rounds, medians.
# Usage: bash bench/dist_bench.sh [BUILD_DIR] [TRAIN_IMAGES] [ROUNDS] [SECTIONS]
#   SECTIONS: a subset of "overlap scaling options" (default: all).
set -euo pipefail
build="${1:-build}"
images="${2:-30000}"
rounds="${3:-3}"
sections="${4:-overlap scaling options}"
source "$(dirname "$0")/launch.sh"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
fm="$build/examples/fashion_mnist/fashion_mnist"

if [[ " $sections " == *" overlap "* ]]; then
echo "== overlap"
launch 2 "$build/bench/ddp_overlap_bench" 768 64 15
fi

if [[ " $sections " == *" scaling "* ]]; then
echo "== scaling (fashion_mnist, $images images, 1 epoch, batch 64 per process)"
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
fi

if [[ " $sections " == *" options "* ]]; then
echo "== DDP options (fashion_mnist, 2 processes, $images images, $rounds rounds)"
for _ in $(seq "$rounds"); do
  for mode in copy view static; do
    extra=(--gradient-as-bucket-view true)
    [ "$mode" = copy ] && extra=(--gradient-as-bucket-view false)
    [ "$mode" = static ] && extra+=(--static-graph)
    launch 2 "$fm" --threads 1 --epochs 1 --limit-train "$images" --limit-test 1000 \
      --batch-size 64 --output-dir "$out/$mode" "${extra[@]}" >/dev/null 2>"$out/$mode.log"
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["samples_per_second"])' \
      "$out/$mode/summary.json" >> "$out/$mode.speeds"
  done
done
python3 - "$out" <<'PY'
import statistics, sys
d = sys.argv[1]
speed = {m: statistics.median(float(x) for x in open(f"{d}/{m}.speeds")) for m in ("copy", "view", "static")}
for m in ("copy", "view", "static"):
    print(f"  {m}: " + " ".join(f"{float(x):.0f}" for x in open(f"{d}/{m}.speeds")))
print(f"  gradient_as_bucket_view off: {speed['copy']:8.0f} samples/s")
print(f"  gradient_as_bucket_view on : {speed['view']:8.0f} samples/s ({speed['view'] / speed['copy']:.2f}x off)")
print(f"  on + static_graph          : {speed['static']:8.0f} samples/s ({speed['static'] / speed['copy']:.2f}x off)")
PY
fi
