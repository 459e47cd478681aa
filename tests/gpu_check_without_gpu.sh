#!/usr/bin/env bash
# scripts/gpu_check/run.sh (the GPU bundle's run.sh) on a machine without a
# GPU: it must say so and exit 2 before running anything. Skipped (77) where
# a GPU is visible, where the bundle's real run applies.
# Usage: gpu_check_without_gpu.sh RUN_SH PYTHON
set -uo pipefail
run_sh="$1" py="$2"
if "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "a GPU is visible: run the bundle (scripts/gpu_bundle.sh) instead"
  exit 77
fi
out="$(PYTHON="$py" bash "$run_sh" 2>&1)"
rc=$?
echo "$out"
[ "$rc" -eq 2 ] || { echo "expected exit 2 without a GPU, got $rc"; exit 1; }
grep -q "no NVIDIA GPU here" <<<"$out" || { echo "no 'no NVIDIA GPU here' message"; exit 1; }
[ ! -e "$(dirname "$run_sh")/out" ] || { echo "it wrote out/ without a GPU"; exit 1; }
PYTHON=/nonexistent/python bash "$run_sh" > /dev/null 2>&1
[ $? -eq 2 ] || { echo "a missing Python must exit 2"; exit 1; }
echo "ok: without a GPU run.sh says so and exits 2"
