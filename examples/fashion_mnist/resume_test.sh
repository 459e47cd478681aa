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
args=(--epochs 2 --limit-train 640 --limit-test 200 --threads 2 --batch-size 64 --mixed-precision no)

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
echo "resume_test: ok (crashed mid-save at step 14, resumed from step 7, weights identical)"
