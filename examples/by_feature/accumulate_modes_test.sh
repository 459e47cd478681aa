#!/usr/bin/env bash
# gradient_accumulation_for_autoregressive_models, accumulated two ways: the
# original's loop by hand (pre-loaded windows, the token count gathered
# by hand, no_sync, the loss scaled by the process count) and ampkit's
# accumulate(model, num_items) (--with_accumulate). Lines of uneven length
# (padding ignored) and a short last window: every grad norm, train loss
# and eval loss agrees within a relative 1e-4, with 2 processes. The two
# ways round differently (the loss divided in another order) and the
# difference grows over the run: within 1e-5 on the Xeons this ran on
# first, 1.2e-5 at step 48 on an EPYC with AVX512-BF16 (the same code). A
# scaling mistake (a factor of the process count or of the accumulation
# steps) moves the grad norms by that factor.
# Usage: accumulate_modes_test.sh AMPKIT_CLI BY_FEATURE_DIR OUT_DIR
set -euo pipefail
cli="$1" dir="$2" out="$3"
rm -rf "$out" && mkdir -p "$out"
fail() { echo "accumulate_modes_test: $*" >&2; exit 1; }
run() {  # PROCESSES LOG [FLAGS...]
  local p="$1" log="$2"
  shift 2
  # 3 processes on 2 cores: --oversubscribe (slower, and the same numbers).
  TESTING_MOCKED_DATALOADERS=1 "$cli" launch --quiet --cpu --num_processes "$p" \
    --num_cpu_threads_per_process 1 --oversubscribe \
    "$dir/gradient_accumulation_for_autoregressive_models" \
    --gradient_accumulation_steps 3 --per_device_batch_size 2 "$@" > "$log" 2>&1 ||
    fail "$p processes $*: $(tail -20 "$log")"
}
numbers() {  # LOG: one "what value" per line
  grep -oE "(grad norm|train loss|eval_loss): [-+0-9.eE]+" "$1" |
    sed 's/^grad norm/grad_norm/; s/^train loss/train_loss/; s/://'
}
for p in 2; do  # 3 agree too (114 numbers), 20 s more of CI
  run "$p" "$out/by_hand_$p.log"
  run "$p" "$out/accumulate_$p.log" --with_accumulate
  numbers "$out/by_hand_$p.log" > "$out/by_hand_$p.txt"
  numbers "$out/accumulate_$p.log" > "$out/accumulate_$p.txt"
  n=$(wc -l < "$out/by_hand_$p.txt")
  [ "$n" -ge 10 ] || fail "$p processes: only $n numbers printed: $(cat "$out/by_hand_$p.log")"
  paste -d' ' "$out/by_hand_$p.txt" "$out/accumulate_$p.txt" | awk -v p="$p" '
    { what = $1; a = $2; b = $4
      if ($3 != what) { print "line " NR ": " what " against " $3; bad = 1; next }
      d = a - b; if (d < 0) d = -d
      m = a < 0 ? -a : a
      if (d > 1e-4 * m + 1e-7) { printf "line %d: %s %s by hand, %s with accumulate\n", NR, what, a, b; bad = 1 } }
    END { if (NR == 0) bad = 1; exit bad }' ||
    fail "$p processes: the two ways differ (by hand: $out/by_hand_$p.log, accumulate: $out/accumulate_$p.log)"
  echo "accumulate_modes_test: $p processes, $n numbers agree"
done
