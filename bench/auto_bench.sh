#!/usr/bin/env bash
# mixed_precision auto against the faster fixed precision, on each example:
# the demo CNN (samples/s), examples/gpt tiny and small (tokens/s) and the
# by_feature MLP (gradient_accumulation's 3 epochs of 60,000 images, training
# samples per second of the whole run, evaluation and start included), run
# in fp32, bf16 and auto in turn, ROUNDS rounds; medians. auto starts with
# an empty cache (its first round measures the model, later rounds read the
# decision back, as a user's repeated runs do).
# Usage: bash bench/auto_bench.sh [BUILD_DIR] [ROUNDS] [EXAMPLES]
#   EXAMPLES: a space-separated subset of "cnn gpt_tiny gpt_small mlp".
set -euo pipefail
build="${1:-build}"
rounds="${2:-3}"
examples="${3:-cnn gpt_tiny gpt_small mlp}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
export XDG_CACHE_HOME="$out/cache"

run() {  # run EXAMPLE PRECISION: prints "SPEED PRECISION_USED"
  local key
  case "$1" in
    cnn)
      "$build/examples/fashion_mnist/fashion_mnist" --threads 2 --epochs 1 \
        --limit-train 12800 --limit-test 1000 --mixed-precision "$2" \
        --output-dir "$out/run" > "$out/log" 2>&1
      key=samples_per_second ;;
    gpt_tiny)
      "$build/examples/gpt/gpt" --config tiny --batch-size 16 --max-steps 120 \
        --untimed-steps 10 --eval-windows 8 --threads 2 --mixed-precision "$2" \
        --output-dir "$out/run" > "$out/log" 2>&1
      key=tokens_per_second ;;
    gpt_small)
      "$build/examples/gpt/gpt" --config small --batch-size 8 --max-steps 40 \
        --untimed-steps 5 --eval-windows 8 --threads 2 --mixed-precision "$2" \
        --output-dir "$out/run" > "$out/log" 2>&1
      key=tokens_per_second ;;
    mlp)
      local start end
      start=$(date +%s.%N)
      "$build/examples/by_feature/gradient_accumulation" --cpu \
        --mixed_precision "$2" > "$out/log" 2>&1
      end=$(date +%s.%N)
      local used="$2"
      [ "$2" = auto ] && used=$(grep -oP 'mixed_precision auto chose \K[a-z0-9]+' "$out/log")
      python3 -c "print(3 * 60000 / ($end - $start), '$used')"
      return ;;
  esac
  python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print(s[sys.argv[2]], s["precision"])' \
    "$out/run/summary.json" "$key"
}

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

printf '%-10s %12s %12s %12s %-6s %s\n' example fp32 bf16 auto chose "auto / faster"
for example in $examples; do
  : > "$out/no" ; : > "$out/bf16" ; : > "$out/auto"
  chose=""
  for _ in $(seq "$rounds"); do
    for p in no bf16 auto; do
      read -r speed used < <(run "$example" "$p")
      echo "$speed" >> "$out/$p"
      [ "$p" = auto ] && chose="$used"
    done
  done
  no=$(median < "$out/no"); bf=$(median < "$out/bf16"); au=$(median < "$out/auto")
  ratio=$(python3 -c "print(f'{$au / max($no, $bf):.3f}')")
  printf '%-10s %12.0f %12.0f %12.0f %-6s %s\n' "$example" "$no" "$bf" "$au" "$chose" "$ratio"
done
