#!/usr/bin/env bash
# A run moves between Python and C++ mid-training, both ways, with the real
# accelerate (the cross-check venv):
#  - accelerate trains the by_feature MLP for 20 steps and saves its state; ampkit's
#    load_state reads that folder (model.safetensors, optimizer.bin,
#    scheduler.bin, random_states_0.pkl) and trains 20 more; the weights
#    equal accelerate's own 20-step continuation within 1e-5 (fp32, the
#    same batches);
#  - ampkit trains 20 steps and saves with SaveFormat::accelerate;
#    accelerate's load_state reads it (torch's random state and the
#    scheduler's step included) and trains 20 more; the weights equal
#    ampkit's own continuation within 1e-5;
#  - a folder of another model is refused, naming what differs.
# Usage: accelerate_checkpoint.sh ACCELERATE_RESUME PYTHON OUT_DIR
set -euo pipefail
bin="$1" python="$2" out="$3"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/require_accelerate.sh"
require_accelerate "$python"
rm -rf "$out" && mkdir -p "$out"
fail() { echo "accelerate_checkpoint: $*" >&2; exit 1; }
"$python" "$here/accelerate_checkpoint.py" save "$out/python_step20" "$out/python_step40.safetensors" ||
  fail "accelerate could not train and save"
ls "$out/python_step20"
"$bin" resume "$out/python_step20" "$out/ampkit_step40.safetensors" > "$out/resume.log" 2>&1 ||
  fail "ampkit could not resume accelerate's folder: $(cat "$out/resume.log")"
grep -q "as accelerate's save_state folder" "$out/resume.log" ||
  fail "load_state did not say what it loaded: $(cat "$out/resume.log")"
"$python" "$here/accelerate_checkpoint.py" compare "$out/python_step40.safetensors" \
  "$out/ampkit_step40.safetensors"
if "$bin" resume "$out/python_step20" "$out/other.safetensors" 8 > "$out/other.log" 2>&1; then
  fail "a model of another shape loaded accelerate's folder"
fi
grep -q "fc1.weight" "$out/other.log" ||
  fail "the refusal does not name the tensor that differs: $(cat "$out/other.log")"
echo "accelerate_checkpoint: Python -> C++ ok"
"$bin" save "$out/ampkit_step20" "$out/ampkit_straight40.safetensors" > "$out/save.log" 2>&1 ||
  fail "ampkit could not save in accelerate's format: $(cat "$out/save.log")"
ls "$out/ampkit_step20"
"$python" "$here/accelerate_checkpoint.py" load "$out/ampkit_step20" "$out/python_from_ampkit40.safetensors" ||
  fail "accelerate could not load and continue ampkit's folder"
"$python" "$here/accelerate_checkpoint.py" compare "$out/ampkit_straight40.safetensors" \
  "$out/python_from_ampkit40.safetensors"
echo "accelerate_checkpoint: C++ -> Python ok"
