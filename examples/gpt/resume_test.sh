#!/usr/bin/env bash
# examples/gpt in bf16 with gradient accumulation, saving a checkpoint at
# step 40; a second run resumed from that checkpoint ends with weights
# bit-identical to the run that never stopped.
# Usage: resume_test.sh GPT OUT_DIR
set -euo pipefail
bin="$1" out="$2"
rm -rf "$out" && mkdir -p "$out"
fail() { echo "gpt resume_test: $*" >&2; exit 1; }
args=(--config tiny --max-steps 80 --threads 1 --eval-windows 32 --sample-chars 0
      --mixed-precision bf16 --gradient-accumulation-steps 2 --batch-size 16)

"$bin" "${args[@]}" --checkpointing-steps 40 --output-dir "$out/straight" \
  > "$out/straight.log" 2>&1 || fail "straight run: $(cat "$out/straight.log")"
[ -f "$out/straight/checkpoints/checkpoint_40/manifest.json" ] || fail "no checkpoint_40"
mkdir -p "$out/resumed/checkpoints"
cp -r "$out/straight/checkpoints/checkpoint_40" "$out/resumed/checkpoints/"
"$bin" "${args[@]}" --resume-from-checkpoint latest --output-dir "$out/resumed" \
  > "$out/resumed.log" 2>&1 || fail "resumed run: $(cat "$out/resumed.log")"
grep -q "resumed from .*checkpoint_40 at step 40" "$out/resumed.log" ||
  fail "did not resume from checkpoint_40: $(cat "$out/resumed.log")"
cmp "$out/straight/model/model.safetensors" "$out/resumed/model/model.safetensors" ||
  fail "the resumed run's weights differ from the straight run's"
echo "gpt resume_test: ok (resumed at step 40 of 80, bf16, accumulation 2: weights identical)"
