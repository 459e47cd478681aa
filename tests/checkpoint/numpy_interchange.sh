#!/usr/bin/env bash
# ampkit's safetensors against an independent numpy reader/writer.
# Usage: numpy_interchange.sh CHECKPOINT_WORKER SAFETENSORS_NUMPY_PY
set -euo pipefail
worker="$1" script="$2"
# Debian's python3 (with python3-numpy), not whatever python3 is first on PATH.
py=/usr/bin/python3
[ -x "$py" ] || py=python3
"$py" -c 'import numpy' 2>/dev/null || { echo "numpy missing: skipped"; exit 77; }
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
"$worker" write-safetensors "$dir/ampkit.safetensors"
"$py" "$script" check "$dir/ampkit.safetensors"
"$py" "$script" write "$dir/numpy.safetensors"
"$worker" check-safetensors "$dir/numpy.safetensors"
