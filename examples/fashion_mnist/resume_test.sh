#!/usr/bin/env bash
# The example crashes in the middle of its second checkpoint; the same
# command line, re-run, resumes from the last complete one and ends with
# weights bit-identical to a run that never stopped.
# Usage: resume_test.sh FASHION_MNIST OUT_DIR TEST_HOOKS_LIB (the crash comes
# from the test suite's hooks, LD_PRELOADed: tests/hooks/test_hooks.cpp)
set -euo pipefail
bin="$1" out="$2" hooks="$3"
rm -rf "$out" && mkdir -p "$out"
fail() { echo "resume_test: $*" >&2; exit 1; }
args=(--epochs 2 --limit-train 640 --limit-test 200 --threads 1 --batch-size 64 --mixed-precision no)

"$bin" "${args[@]}" --output-dir "$out/straight" > "$out/straight.log" 2>&1 || fail "straight run: $(cat "$out/straight.log")"

# Each save writes 6 files and the manifest: the 10th is inside the second save.
cmd=("$bin" "${args[@]}" --output-dir "$out/run" --checkpointing-steps 7 --resume-from-checkpoint latest)
set +e
LD_PRELOAD="$hooks" AMPKIT_FAULT_INJECT=kill_after_files=10 "${cmd[@]}" > "$out/crash.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 137 ] || fail "the injected crash did not happen (exit $rc): $(cat "$out/crash.log")"
grep -q "starting fresh" "$out/crash.log" || fail "latest without a checkpoint did not say so: $(cat "$out/crash.log")"
[ -f "$out/run/checkpoints/checkpoint_7/manifest.json" ] || fail "no complete first checkpoint"
[ -d "$out/run/checkpoints/checkpoint_14.partial" ] || fail "no partial second checkpoint"

"${cmd[@]}" > "$out/resume.log" 2>&1 || fail "resumed run: $(cat "$out/resume.log")"
grep -q "resumed from .*checkpoint_7 at step 7" "$out/resume.log" || fail "did not resume from checkpoint_7: $(cat "$out/resume.log")"
cmp "$out/straight/model/model.safetensors" "$out/run/model/model.safetensors" ||
  fail "the resumed run's weights differ from the straight run's"
# It shows its own loss from its first step, and its summary says where it began.
! grep -q "loss 0.0000" "$out/resume.log" || fail "the resumed run showed loss 0.0000: $(cat "$out/resume.log")"
grep -q '"first_step": 8' "$out/run/summary.json" || fail "summary.json lacks first_step 8: $(cat "$out/run/summary.json")"
grep -q '"train_loss_steps"' "$out/run/summary.json" || fail "summary.json lacks train_loss_steps"

# Resume checks what it restores: a longer run (another schedule length) or
# another accumulation is refused, naming both values; --reset-schedule
# continues the longer schedule from the saved step.
mkdir -p "$out/longer/checkpoints"
cp -r "$out/run/checkpoints/checkpoint_7" "$out/longer/checkpoints/"
longer=("$bin" --epochs 3 --limit-train 640 --limit-test 200 --threads 1 --batch-size 64 --mixed-precision no
  --output-dir "$out/longer" --resume-from-checkpoint latest)
set +e
"${longer[@]}" > "$out/longer.log" 2>&1
rc=$?
"$bin" "${args[@]}" --gradient-accumulation-steps 2 --output-dir "$out/accumulate" \
  --resume-from-checkpoint "$out/run/checkpoints/checkpoint_7" > "$out/accumulate.log" 2>&1
rc_accumulate=$?
set -e
[ "$rc" -ne 0 ] && grep -q "schedule was saved for 20 training steps, this run's is for 30" "$out/longer.log" ||
  fail "a longer run resumed onto the saved schedule (exit $rc): $(cat "$out/longer.log")"
[ "$rc_accumulate" -ne 0 ] && grep -q "saved with gradient_accumulation_steps 1, this run has 2" "$out/accumulate.log" ||
  fail "another accumulation was resumed (exit $rc_accumulate): $(cat "$out/accumulate.log")"
"${longer[@]}" --reset-schedule > "$out/reset.log" 2>&1 || fail "--reset-schedule: $(cat "$out/reset.log")"
grep -q "resumed from .*checkpoint_7 at step 7" "$out/reset.log" || fail "--reset-schedule did not resume: $(cat "$out/reset.log")"
grep -q '"steps": 30' "$out/longer/summary.json" || fail "--reset-schedule did not run 30 steps: $(cat "$out/longer/summary.json")"

# A damaged checkpoint is never passed over in silence nor saved over. Only
# checkpoint_14 left, one bit flipped: `latest` refuses to start fresh.
ck="$out/run/checkpoints"
mv "$ck/checkpoint_7" "$out/checkpoint_7"
weights="$(find "$ck/checkpoint_14" -name '*.safetensors' | sort | head -1)"
python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 1; open(p, "wb").write(b)' "$weights"
cp "$weights" "$out/damaged.safetensors"
set +e
"${cmd[@]}" > "$out/damaged.log" 2>&1
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "resumed from only a damaged checkpoint (exit 0): $(cat "$out/damaged.log")"
grep -q "none is intact" "$out/damaged.log" || fail "no refusal naming the damage: $(cat "$out/damaged.log")"
grep -q "fails its checksum" "$out/damaged.log" || fail "the failed check is not named: $(cat "$out/damaged.log")"
cmp "$weights" "$out/damaged.safetensors" || fail "the damaged checkpoint was changed"
# With an intact older one: a warning names the damaged one, the run resumes
# from step 7, and its save at step 14 keeps the damaged folder aside.
mv "$out/checkpoint_7" "$ck/checkpoint_7"
"${cmd[@]}" > "$out/fallback.log" 2>&1 || fail "fallback run: $(cat "$out/fallback.log")"
grep -q "skipping a damaged checkpoint: .*checkpoint_14" "$out/fallback.log" || fail "no warning for the damaged checkpoint: $(cat "$out/fallback.log")"
grep -q "resumed from .*checkpoint_7 at step 7" "$out/fallback.log" || fail "did not resume from checkpoint_7: $(cat "$out/fallback.log")"
cmp "$ck/checkpoint_14.damaged/${weights#"$ck/checkpoint_14/"}" "$out/damaged.safetensors" ||
  fail "the damaged checkpoint_14 was not kept aside"
cmp "$out/straight/model/model.safetensors" "$out/run/model/model.safetensors" ||
  fail "the run resumed past a damaged checkpoint differs from the straight run"
echo "resume_test: ok (crashed mid-save at step 14, resumed from step 7, weights identical; a damaged checkpoint refused, then passed over with a warning and kept aside)"
