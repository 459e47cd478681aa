#!/usr/bin/env bash
# Cross-check of two by_feature twins against the real accelerate: the C++
# twins (under `ampkit launch`) and their Python peers (peer_examples.py, on
# accelerate's own Accelerator) must print the same counts:
#   gradient_accumulation: "optimizer steps: A scheduler steps: B"
#   multi_process_metrics: "gathered samples: X of Y" (one per epoch)
# for 1 and 2 processes (CROSSCHECK_PROCESSES overrides, e.g. "1 2 3").
#
# Usage: compare_examples.sh AMPKIT_CLI TWIN_DIR PYTHON
#   AMPKIT_CLI  build/tools/ampkit/ampkit
#   TWIN_DIR    build/examples/by_feature (gradient_accumulation and
#               multi_process_metrics live there)
#   PYTHON      an interpreter with accelerate (and torch) installed
# Exit: 0 all equal, 1 a mismatch or a failed run, 77 (CTest skip) when
# PYTHON cannot import accelerate and CI is unset (with CI set: 1).
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 AMPKIT_CLI TWIN_DIR PYTHON" >&2
  exit 2
fi
cli=$1
twins=$2
python=$3
here=$(cd "$(dirname "$0")" && pwd)

source "$(dirname "$0")/require_accelerate.sh"
require_accelerate "$python"

export TESTING_MOCKED_DATALOADERS=1  # 2048/512 images, 2 epochs
steps=2                              # --gradient_accumulation_steps
failed=0

# The C++ twin's output: `ampkit launch` with P processes on the CPU.
twin() {
  local p=$1
  shift
  timeout 600 "$cli" launch --quiet --cpu --num_processes "$p" \
    --num_cpu_threads_per_process 1 "$twins/$1" "${@:2}" 2>&1
}

# The Python peer's output, with P processes (peer_examples.py spawns them).
peer() {
  local p=$1
  shift
  OMP_NUM_THREADS=1 timeout 600 "$python" "$here/peer_examples.py" \
    --nproc "$p" "$@" 2>&1
}

# compare NAME PATTERN TWIN_OUTPUT PEER_OUTPUT: the lines matching PATTERN
# (joined with "; ", rank prefixes dropped) must be equal and not empty.
compare() {
  local name=$1 pattern=$2 ours theirs
  ours=$(grep -oE "$pattern" <<<"$3" | paste -sd ';' | sed 's/;/; /g' || true)
  theirs=$(grep -oE "$pattern" <<<"$4" | paste -sd ';' | sed 's/;/; /g' || true)
  echo "  ampkit:     ${ours:-<none>}"
  echo "  accelerate: ${theirs:-<none>}"
  if [ -n "$ours" ] && [ "$ours" = "$theirs" ]; then
    echo "ok: $name"
  else
    echo "FAIL: $name"
    failed=1
  fi
}

# run_both NAME PATTERN P EXAMPLE [ARGS...]: both sides, then compare; a
# failed run prints its output.
run_both() {
  local name=$1 pattern=$2 p=$3 ours theirs
  shift 3
  if ! ours=$(twin "$p" "$@"); then
    echo "FAIL: $name: the C++ twin failed:"
    echo "$ours" | tail -20
    failed=1
    return
  fi
  if ! theirs=$(peer "$p" "$@"); then
    echo "FAIL: $name: the Python peer failed:"
    echo "$theirs" | tail -20
    failed=1
    return
  fi
  compare "$name" "$pattern" "$ours" "$theirs"
}

for p in ${CROSSCHECK_PROCESSES:-1 2}; do
  run_both "gradient_accumulation, $p process(es), $steps accumulation steps" \
    'optimizer steps: [0-9]+ scheduler steps: [0-9]+' \
    "$p" gradient_accumulation --gradient_accumulation_steps "$steps"
  run_both "multi_process_metrics, $p process(es)" \
    'gathered samples: [0-9]+ of [0-9]+' \
    "$p" multi_process_metrics
done
exit "$failed"
