#!/usr/bin/env bash
# Preemption with a real SIGTERM, as Slurm, Kubernetes or a spot instance
# sends it before SIGKILL: the demo finishes its step, saves
# checkpoint_<step>, says so and exits with 143; the same command line, run
# again, resumes there and ends bit-identical to a run that never stopped.
# With a launcher (ampkit launch, 2 processes), the signal goes to the
# launcher, which forwards it: both processes stop at the same step.
# Usage: preempt_test.sh FASHION_MNIST OUT_DIR [AMPKIT_CLI]
set -euo pipefail
bin="$1" out="$2" cli="${3:-}"
rm -rf "$out" && mkdir -p "$out"
fail() { echo "preempt_test: $*" >&2; exit 1; }
args=(--epochs 1 --max-steps 120 --limit-test 200 --batch-size 32 --mixed-precision no)
launch=()
if [ -n "$cli" ]; then
  launch=("$cli" launch --quiet --cpu --num_processes 2 --num_cpu_threads_per_process 1)
else
  args+=(--threads 1)
fi

"${launch[@]}" "$bin" "${args[@]}" --output-dir "$out/straight" > "$out/straight.log" 2>&1 ||
  fail "straight run: $(cat "$out/straight.log")"

cmd=("${launch[@]}" "$bin" "${args[@]}" --output-dir "$out/run" --checkpointing-steps 10 --resume-from-checkpoint latest)
"${cmd[@]}" > "$out/first.log" 2>&1 &
pid=$!
# The signal comes once training runs: after the first regular checkpoint
# (or when the run has ended, which the kill below reports). CTest's
# timeout bounds the wait; a busy machine only makes it longer.
until [ -f "$out/run/checkpoints/checkpoint_10/manifest.json" ] ||
  ! kill -0 "$pid" 2>/dev/null; do
  sleep 0.05
done
kill -TERM "$pid" 2>/dev/null || fail "the run ended before the signal: $(cat "$out/first.log")"
set +e
wait "$pid"
rc=$?
set -e
[ "$rc" -eq 143 ] || fail "exit $rc after SIGTERM, not 143: $(cat "$out/first.log")"
line="$(grep "SIGTERM at step" "$out/first.log" | head -1)"
step="$(echo "$line" | sed -n 's/.*SIGTERM at step \([0-9]*\): saved .*/\1/p')"
[ -n "$step" ] || fail "no line saying what was saved: $(cat "$out/first.log")"
[ -f "$out/run/checkpoints/checkpoint_$step/manifest.json" ] ||
  fail "checkpoint_$step, which it says it saved, is not complete"
[ "$step" -lt 120 ] || fail "the signal came after the last step; nothing was checked"

"${cmd[@]}" > "$out/resume.log" 2>&1 || fail "resumed run: $(cat "$out/resume.log")"
grep -q "resumed from .*checkpoint_$step at step $step" "$out/resume.log" ||
  fail "did not resume from checkpoint_$step: $(cat "$out/resume.log")"
cmp "$out/straight/model/model.safetensors" "$out/run/model/model.safetensors" ||
  fail "the run stopped by SIGTERM and resumed differs from the straight run"
echo "preempt_test: ok (SIGTERM at step $step, saved, exit 143, resumed bit-identically)"
