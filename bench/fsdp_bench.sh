#!/usr/bin/env bash
# FSDP and ZeRO-2 against DDP on the CPU (Gloo), side by side in one run:
# examples/gpt (the small configuration unless CONFIG is given) trained for
# STEPS optimizer steps on 2 processes, one intra-op thread each, as DDP,
# zero_stage 2, FSDP FULL_SHARD (without and with forward and backward
# prefetch), SHARD_GRAD_OP, and FULL_SHARD with activation checkpointing; 3 rounds alternating, medians. Reported: the
# training throughput (tokens/s) as a step-time ratio to DDP's, and the
# bytes a process holds between steps (parameters, gradients, optimizer
# state: the summary's held_bytes), the most tensor memory allocated at
# once during a step (peak_step_bytes) and what a forward leaves allocated
# for its backward (activation_bytes: the saved activations), each as a
# ratio to DDP's.
# Usage: bash bench/fsdp_bench.sh [BUILD_DIR] [STEPS] [CONFIG]
set -euo pipefail
build="${1:-build}"
steps="${2:-40}"
config="${3:-small}"
exe="$build/examples/gpt/gpt"
source "$(dirname "$0")/launch.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
declare -A flags=(
  [ddp]=""
  [zero2]="--zero-stage 2"
  [full_shard]="--fsdp FULL_SHARD"
  [full_shard_prefetch]="--fsdp FULL_SHARD --forward-prefetch --backward-prefetch BACKWARD_PRE"
  [shard_grad_op]="--fsdp SHARD_GRAD_OP"
  [full_shard_ac]="--fsdp FULL_SHARD --activation-checkpointing"
)
order=(ddp zero2 full_shard full_shard_prefetch shard_grad_op full_shard_ac)
for round in 1 2 3; do
  for name in "${order[@]}"; do
    # shellcheck disable=SC2086
    launch 2 timeout 900 "$exe" --config "$config" --max-steps "$steps" \
      --threads 1 --eval-windows 8 --sample-chars 0 --untimed-steps 5 \
      --output-dir "$work/$name.$round" ${flags[$name]} \
      >"$work/$name.$round.log" 2>&1 ||
      { echo "fsdp_bench: $name failed:"; tail -5 "$work/$name.$round.log"; exit 1; }
  done
done
python3 - "$work" "${order[@]}" <<'PY'
import json, statistics, sys
work, names = sys.argv[1], sys.argv[2:]
runs = {n: [json.load(open(f"{work}/{n}.{r}/summary.json")) for r in (1, 2, 3)]
        for n in names}
tps = {n: statistics.median(s["tokens_per_second"] for s in runs[n]) for n in names}
held = {n: runs[n][0]["held_bytes"] for n in names}
peak = {n: runs[n][0]["peak_step_bytes"] for n in names}
act = {n: runs[n][0]["activation_bytes"] for n in names}
s = runs["ddp"][0]
print(f"gpt {s['config']}: {s['parameters']:,} parameters, 2 processes, AdamW, "
      f"fp32, {s['steps']} steps, medians of 3 rounds")
print(f"{'run':<16}{'tokens/s':>10}{'step time x DDP':>17}{'held bytes':>13}"
      f"{'x DDP':>7}{'peak bytes':>13}{'x DDP':>7}{'activations':>13}{'x DDP':>7}")
for n in names:
    print(f"{n:<16}{tps[n]:>10.0f}{tps['ddp'] / tps[n]:>17.2f}"
          + "".join(f"{v[n]:>13,}{v[n] / v['ddp']:>7.3f}" for v in (held, peak, act)))
PY
