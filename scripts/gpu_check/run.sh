#!/usr/bin/env bash
# The GPU check: run from a bundle that scripts/gpu_bundle.sh made, on a
# machine with an NVIDIA GPU and Python torch 2.11 (+ CUDA 13):
#
#   bash DIR/run.sh            # about 3-6 minutes; writes DIR/results.json
#
# LibTorch is the Python torch's (torch.utils.cmake_prefix_path); the
# bundle brings ampkit's binaries and its non-LibTorch libraries. Without a
# GPU it says so and exits 2. Exit 0 when every test passed (the benchmark
# targets are reported in results.json, not enforced), 1 otherwise.
#   PYTHON=...            the Python with torch (default python3)
#   AMPKIT_GPU_CHECK_QUICK=1  fewer benchmark steps
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
out="$here/out"
results="$here/results.json"

say() { echo "gpu_check: $*" >&2; }

if ! command -v "$py" >/dev/null; then
  say "no $py: the GPU check needs Python with torch 2.11 (set PYTHON=...)"
  exit 2
fi
probe="$("$py" - <<'EOF' 2>&1
import os, torch, torch.utils
print(torch.__version__)
print(os.path.join(torch.utils.cmake_prefix_path, "..", "..", "lib"))
print(int(torch.cuda.is_available()))
print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
EOF
)" || { say "cannot import torch with $py: $probe"; exit 2; }
torch_version="$(sed -n 1p <<<"$probe")"
torch_lib="$(cd "$(sed -n 2p <<<"$probe")" && pwd)"
has_gpu="$(sed -n 3p <<<"$probe")"
gpu_name="$(sed -n 4p <<<"$probe")"
if [ "$has_gpu" != 1 ]; then
  say "no NVIDIA GPU here: Python torch $torch_version sees no CUDA device" \
    "(torch.cuda.is_available() is False). The GPU check needs one; nothing ran."
  exit 2
fi
bundle_torch="$(cat "$here/TORCH_VERSION")"
if [ "${torch_version%%+*}" != "${bundle_torch%%+*}" ]; then
  say "the bundle was built against LibTorch $bundle_torch, this Python has" \
    "torch $torch_version: C++ binaries need the same version; install" \
    "torch==${bundle_torch%%+*} (pip) or rebuild the bundle against $torch_version."
  exit 2
fi
nvidia_libs="$torch_lib/../../nvidia"
export LD_LIBRARY_PATH="$here/lib:$torch_lib:$nvidia_libs/cu13/lib:$nvidia_libs/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Debian 12's libstdc++ comes along for systems with an older one.
if ! "$here/bin/ampkit" --version >/dev/null 2>&1; then
  export LD_LIBRARY_PATH="$here/lib/fallback:$LD_LIBRARY_PATH"
  if ! err="$("$here/bin/ampkit" --version 2>&1)"; then
    say "the bundle's programs do not start here: $err"
    exit 2
  fi
fi
rm -rf "$out" && mkdir -p "$out"
say "$gpu_name, torch $torch_version, LibTorch from $torch_lib"
threads="$(nproc)"
export CI=1  # plain progress lines in the logs

# Each check: name, command; its output goes to out/NAME.log and its exit
# code and time into out/checks.tsv.
check() {
  local name="$1"; shift
  local t0=$SECONDS
  "$@" > "$out/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$out/checks.tsv"
  say "$name: $([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc, see out/$name.log)") in $((SECONDS - t0)) s"
}
# 1. CUDA autocast dtypes: Python torch's on this GPU, then LibTorch's.
check autocast_table "$py" "$here/python/tests/amp/generate_golden.py" --cuda-table "$out/autocast_cuda.txt"
AMPKIT_CUDA_AUTOCAST_TABLE="$out/autocast_cuda.txt" \
  check amp_gpu_tests "$here/bin/amp_gpu_tests"
# 2. The Accelerator on the GPU: injected inf, bf16, NCCL, trigger, CUDA RNG.
check accelerator_gpu_tests "$here/bin/accelerator_gpu_tests"
check diag_gpu_tests "$here/bin/diag_gpu_tests"
# 3. ampkit doctor.
check doctor "$here/bin/ampkit" doctor
# 4. The demo CNN, 3 epochs per precision; fp32 also logs with auto_log
#    (NVML figures) into its run directory.
for mp in no fp16 bf16; do
  extra=()
  [ "$mp" = no ] && extra=(--log-with jsonl)
  check "cnn_$mp" "$here/bin/fashion_mnist" --epochs 3 --threads "$threads" \
    --mixed-precision "$mp" --data-dir "$here/data/fashion-mnist" \
    --output-dir "$out/cnn_$mp" "${extra[@]}"
done
# 5. GPT-2 small (124M, context 1024): ampkit and the Python peer, alternating.
steps=30 untimed=8
[ "${AMPKIT_GPU_CHECK_QUICK:-0}" = 1 ] && steps=14 untimed=4
gunzip -c "$here/data/kjv.txt.gz" > "$out/kjv.txt"
for mp in no fp16 bf16; do
  check "gpt_ampkit_$mp" "$here/bin/gpt" --config gpt2 --batch-size 16 \
    --max-steps "$steps" --untimed-steps "$untimed" --mixed-precision "$mp" \
    --eval-windows 16 --sample-chars 0 --log-interval "$steps" \
    --threads "$threads" --data-file "$out/kjv.txt" --output-dir "$out/gpt_$mp"
  check "gpt_python_$mp" "$py" "$here/python/bench/gpt_peer.py" --config gpt2 \
    --batch-size 16 --max-steps "$steps" --untimed-steps "$untimed" \
    --mixed-precision "$mp" --data-file "$out/kjv.txt"
done
rm -rf "$out"/gpt_*/model "$out"/cnn_*/model

"$py" "$here/summarize.py" "$out" "$results" "$gpu_name" "$torch_version"
