#!/usr/bin/env bash
# scripts/gpu_check/run.sh (the GPU bundle's run.sh) on a machine without a
# GPU: it must say so, exit 2 before running anything, and leave a
# results.json that says why. Skipped (77) where a GPU is visible, where
# the bundle's real run applies.
# Usage: gpu_check_without_gpu.sh RUN_SH PYTHON
set -uo pipefail
run_sh="$1" py="$2"
if "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "a GPU is visible: run the bundle (scripts/gpu_bundle.sh) instead"
  exit 77
fi
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export AMPKIT_GPU_CHECK_RESULTS="$dir/results.json" AMPKIT_GPU_CHECK_OUT="$dir/out"
echo stale > "$dir/results.json"
out="$(PYTHON="$py" bash "$run_sh" 2>&1)"
rc=$?
echo "$out"
[ "$rc" -eq 2 ] || { echo "expected exit 2 without a GPU, got $rc"; exit 1; }
grep -q "no NVIDIA GPU here" <<<"$out" || { echo "no 'no NVIDIA GPU here' message"; exit 1; }
[ ! -e "$dir/out" ] || { echo "it wrote out/ without a GPU"; exit 1; }
"$py" - "$dir/results.json" <<'PY' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "no_gpu" and r["exit_code"] == 2 and r["passed"] is False, r
assert "no NVIDIA GPU here" in r["reason"], r
PY
PYTHON=/nonexistent/python bash "$run_sh" > /dev/null 2>&1
[ $? -eq 2 ] || { echo "a missing Python must exit 2"; exit 1; }
grep -q '"status": "no_gpu"' "$dir/results.json" || { echo "no results.json for a missing Python"; exit 1; }
echo "ok: without a GPU run.sh says so, exits 2 and writes results.json"
