#!/usr/bin/env bash
# enable_cpu_affinity on against off: the demo CNN as 2 processes on the
# CPU under `ampkit launch --cpu`, one epoch over 12800 images, ROUNDS
# rounds alternating (off first in odd rounds, on first in even ones);
# median samples/s of each and the ratio on/off.
# Usage: bash bench/affinity_bench.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
build="${1:-build}"
rounds="${2:-3}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
export AMPKIT_CONFIG_FILE="$out/none.yaml"

run() {  # run on|off: prints samples/s
  local flag=()
  [ "$1" = on ] && flag=(--enable_cpu_affinity)
  env -u OMP_NUM_THREADS "$build/tools/ampkit/ampkit" launch --quiet --cpu --num_processes 2 \
    "${flag[@]}" "$build/examples/fashion_mnist/fashion_mnist" --epochs 1 \
    --limit-train 12800 --limit-test 1000 --output-dir "$out/run" > "$out/log" 2>&1 ||
    { cat "$out/log" >&2; exit 1; }
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["samples_per_second"])' \
    "$out/run/summary.json"
}

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

: > "$out/on"; : > "$out/off"
for r in $(seq "$rounds"); do
  order=(off on); [ $((r % 2)) -eq 0 ] && order=(on off)
  for a in "${order[@]}"; do run "$a" >> "$out/$a"; done
done
on=$(median < "$out/on"); off=$(median < "$out/off")
printf 'affinity off: %s samples/s (%s)\n' "$off" "$(paste -sd' ' "$out/off")"
printf 'affinity on:  %s samples/s (%s)\n' "$on" "$(paste -sd' ' "$out/on")"
python3 -c "print(f'on/off: {$on / $off:.3f}')"
