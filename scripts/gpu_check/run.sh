#!/usr/bin/env bash
# The GPU check: run from a bundle that scripts/gpu_bundle.sh made, on a
# machine with an NVIDIA GPU and Python torch 2.11 (+ CUDA 13):
#
#   bash DIR/run.sh            # writes DIR/results.json
#
# Budget: about 5 minutes on an H100 (estimate, not measured: unit tests
# ~1 min, the demo CNN 4 x ~15 s, GPT-2 small 4 precisions x 3 alternating
# pairs x 2 sides x 5-15 s ~ 3.5 min). Each check has its own timeout, so
# the whole run ends within about 25 minutes whatever hangs.
#
# results.json is deleted first and rewritten after every check; it lists
# every expected check, so one that never ran reads as not run (failed),
# and each failed check carries the last 2 KiB of its log.
#
# Exit codes (every exit writes results.json saying why):
#   0 every check passed (benchmark targets are reported, not enforced)
#   1 a check failed
#   2 no GPU here (or no Python with torch to ask)
#   3 the bundle cannot run here: another torch (version or CUDA build),
#     programs that do not start, or a C++ side that sees no GPU
#
#   PYTHON=...                     the Python with torch (default python3)
#   AMPKIT_GPU_CHECK_QUICK=1       2 pairs per precision, fewer steps
#   AMPKIT_GPU_CHECK_RESULTS=FILE  where results.json goes
#   AMPKIT_GPU_CHECK_DRY_RUN=1     no GPU needed: every check is listed and
#                                  echoed instead of run (tests/gpu_check_dry_run.sh)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
out="${AMPKIT_GPU_CHECK_OUT:-$here/out}"
results="${AMPKIT_GPU_CHECK_RESULTS:-$here/results.json}"
dry="${AMPKIT_GPU_CHECK_DRY_RUN:-0}"
quick="${AMPKIT_GPU_CHECK_QUICK:-0}"
rm -f "$results"

say() { echo "gpu_check: $*" >&2; }

# results.json for an exit before the checks (no GPU, a bundle that cannot
# run), written without Python: STATUS CODE REASON.
stop() {
  local reason
  reason="$(printf '%s' "$3" | tr '\t\r' '  ' | sed 's/\\/\\\\/g; s/"/\\"/g' |
    awk 'NR > 1 {printf "\\n"} {printf "%s", $0}')"
  printf '{\n  "status": "%s",\n  "exit_code": %s,\n  "passed": false,\n  "reason": "%s"\n}\n' \
    "$1" "$2" "$reason" > "$results"
  say "$3"
  exit "$2"
}

if [ "$dry" = 1 ]; then
  gpu_name="dry run (no GPU)" torch_version="dry run"
else
  command -v "$py" >/dev/null ||
    stop no_gpu 2 "no $py: the GPU check needs Python with torch 2.11 (set PYTHON=...)"
  # The Python side runs in its own environment: no bundle libraries.
  probe="$("$py" - <<'EOF' 2>&1
import os, torch, torch.utils
print(torch.__version__)
print(os.path.join(torch.utils.cmake_prefix_path, "..", "..", "lib"))
print(int(torch.cuda.is_available()))
print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
EOF
)" || stop no_gpu 2 "cannot import torch with $py: $probe"
  torch_version="$(sed -n 1p <<<"$probe")"
  torch_lib="$(cd "$(sed -n 2p <<<"$probe")" && pwd)"
  has_gpu="$(sed -n 3p <<<"$probe")"
  gpu_name="$(sed -n 4p <<<"$probe")"
  [ "$has_gpu" = 1 ] || stop no_gpu 2 "no NVIDIA GPU here: Python torch $torch_version sees no CUDA device (torch.cuda.is_available() is False). The GPU check needs one; nothing ran."
  bundle_torch="$(cat "$here/TORCH_VERSION" 2>/dev/null)"
  # The whole version, CUDA build included (2.11.0+cu130 is not +cu126).
  [ "$torch_version" = "$bundle_torch" ] ||
    stop bundle_cannot_run 3 "the bundle was built against LibTorch ${bundle_torch:-?}, this Python has torch $torch_version: C++ binaries need the same version and CUDA build; install torch==$bundle_torch (pip) or rebuild the bundle against $torch_version."
  nvidia_libs="$torch_lib/../../nvidia"
  cpp_path="$here/lib:$torch_lib:$nvidia_libs/cu13/lib:$nvidia_libs/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Debian 12's libstdc++ comes along for systems with an older one.
  if ! LD_LIBRARY_PATH="$cpp_path" "$here/bin/ampkit" --version >/dev/null 2>&1; then
    cpp_path="$here/lib/fallback:$cpp_path"
    err="$(LD_LIBRARY_PATH="$cpp_path" "$here/bin/ampkit" --version 2>&1)" ||
      stop bundle_cannot_run 3 "the bundle's programs do not start here: $err"
  fi
fi
rm -rf "$out" && mkdir -p "$out"
say "$gpu_name, torch $torch_version"
threads="$(nproc)"
export CI=1  # plain progress lines in the logs

# GPT-2 small: each precision (fp32 strict and TF32 alike on both sides)
# in alternating pairs, the order swapped every pair.
pairs=3 steps=16 untimed=4
[ "$quick" = 1 ] && pairs=2 steps=10 untimed=3
gpt_modes="fp32_strict fp32_tf32 fp16 bf16"

expected=(cpp_sees_gpu autocast_table amp_gpu_tests accelerator_gpu_tests
  diag_gpu_tests doctor cnn_no cnn_fp16 cnn_bf16 cnn_bf16_no_prefetch)
for mode in $gpt_modes; do
  for i in $(seq "$pairs"); do
    expected+=("gpt_ampkit_${mode}_$i" "gpt_python_${mode}_$i")
  done
done
expected+=(gpt_plain_small_bf16 gpt_fsdp_small_bf16)

summarize() {  # STATUS
  "$py" "$here/summarize.py" --out "$out" --results "$results" --gpu "$gpu_name" \
    --torch "$torch_version" --status "$1" --pairs "$pairs" --expected "${expected[*]}"
}

# A check: NAME TIMEOUT_S KIND (cpp: the bundle's library path; py: its own
# environment) COMMAND...; output into out/NAME.log, exit code and seconds
# into out/checks.tsv, then results.json is rewritten.
check() {
  local name="$1" limit="$2" kind="$3"; shift 3
  local t0=$SECONDS rc
  if [ "$dry" = 1 ]; then
    echo "dry run: $*" > "$out/$name.log"
    rc=0
  elif [ "$kind" = cpp ]; then
    LD_LIBRARY_PATH="$cpp_path" AMPKIT_REQUIRE_GPU=1 \
      timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
    rc=$?
  else
    timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
    rc=$?
  fi
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && echo "gpu_check: timed out after $limit s" >> "$out/$name.log"
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$out/checks.tsv"
  say "$name: $([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc, see out/$name.log)") in $((SECONDS - t0)) s"
  summarize running > /dev/null 2>&1
  return "$rc"
}

# 0. The C++ side sees the GPU and binds it (else nothing below means much).
if ! check cpp_sees_gpu 60 cpp "$here/bin/accelerator_gpu_tests" \
    --gtest_filter='*TheAcceleratorsDeviceIsTheCurrentDevice*'; then
  summarize bundle_cannot_run
  stop_reason="the bundle's C++ side does not see the GPU that Python sees (out/cpp_sees_gpu.log)"
  say "$stop_reason"
  exit 3
fi
# 1. CUDA autocast dtypes: Python torch's on this GPU, then LibTorch's.
check autocast_table 120 py "$py" "$here/python/tests/amp/generate_golden.py" --cuda-table "$out/autocast_cuda.txt"
AMPKIT_CUDA_AUTOCAST_TABLE="$out/autocast_cuda.txt" \
  check amp_gpu_tests 180 cpp "$here/bin/amp_gpu_tests"
# 2. The Accelerator on the GPU: injected inf, bf16, NCCL, trigger, CUDA RNG,
#    no host sync in the step.
check accelerator_gpu_tests 240 cpp "$here/bin/accelerator_gpu_tests"
check diag_gpu_tests 60 cpp "$here/bin/diag_gpu_tests"
# 3. ampkit doctor.
check doctor 60 cpp "$here/bin/ampkit" doctor
# 4. The demo CNN, 3 epochs per precision; fp32 also logs with auto_log
#    (NVML figures) into its run directory.
for mp in no fp16 bf16; do
  extra=()
  [ "$mp" = no ] && extra=(--log-with jsonl)
  check "cnn_$mp" 180 cpp "$here/bin/fashion_mnist" --epochs 3 --threads "$threads" \
    --mixed-precision "$mp" --data-dir "$here/data/fashion-mnist" \
    --output-dir "$out/cnn_$mp" "${extra[@]}"
done
# The same bf16 run with batches copied as they are handed out (no pinned
# memory, no side stream): what the prefetching loader gains.
check cnn_bf16_no_prefetch 180 cpp "$here/bin/fashion_mnist" --epochs 3 --threads "$threads" \
  --mixed-precision bf16 --prefetch false --data-dir "$here/data/fashion-mnist" \
  --output-dir "$out/cnn_bf16_no_prefetch"
# 5. GPT-2 small (124M, context 1024), ampkit against the Python peer.
[ "$dry" = 1 ] || gunzip -c "$here/data/kjv.txt.gz" > "$out/kjv.txt"
gpt_run() {  # SIDE MODE PAIR
  local side="$1" mode="$2" i="$3" mp tf32
  case "$mode" in
    fp32_strict) mp=no tf32=off ;;
    fp32_tf32) mp=no tf32=on ;;
    *) mp="$mode" tf32=off ;;
  esac
  local n="$steps" u="$untimed"
  # Strict fp32 is ~10x slower per step: fewer steps, the same warm-up.
  [ "$mode" = fp32_strict ] && n=$((untimed + 6))
  if [ "$side" = ampkit ]; then
    check "gpt_ampkit_${mode}_$i" 180 cpp "$here/bin/gpt" --config gpt2 --batch-size 16 \
      --max-steps "$n" --untimed-steps "$u" --mixed-precision "$mp" --tf32 "$tf32" \
      --eval-windows 16 --sample-chars 0 --log-interval "$n" \
      --threads "$threads" --data-file "$out/kjv.txt" --output-dir "$out/gpt_${mode}_$i"
  else
    check "gpt_python_${mode}_$i" 180 py "$py" "$here/python/bench/gpt_peer.py" --config gpt2 \
      --batch-size 16 --max-steps "$n" --untimed-steps "$u" --mixed-precision "$mp" \
      --tf32 "$tf32" --data-file "$out/kjv.txt"
  fi
}
for mode in $gpt_modes; do
  for i in $(seq "$pairs"); do
    if [ $((i % 2)) -eq 1 ]; then
      gpt_run ampkit "$mode" "$i"; gpt_run python "$mode" "$i"
    else
      gpt_run python "$mode" "$i"; gpt_run ampkit "$mode" "$i"
    fi
  done
done
# 6. FSDP on the GPU, one process (NCCL takes one GPU per process, so its
#    gathers are copies): examples/gpt small in bf16, plain and as
#    FULL_SHARD with prefetch, activation checkpointing and a sharded
#    checkpoint: the units' buffers freed in CUDA memory, MixedPrecision's
#    bf16 casts, the recompute under CUDA's RNG, the caching allocator's
#    peak (derived.fsdp_small_bf16).
small=(--config small --batch-size 16 --max-steps 40 --mixed-precision bf16
  --eval-windows 16 --sample-chars 0 --threads "$threads" --data-file "$out/kjv.txt")
check gpt_plain_small_bf16 180 cpp "$here/bin/gpt" "${small[@]}" \
  --output-dir "$out/gpt_plain_small_bf16"
check gpt_fsdp_small_bf16 180 cpp "$here/bin/gpt" "${small[@]}" --fsdp FULL_SHARD \
  --forward-prefetch --backward-prefetch BACKWARD_PRE --activation-checkpointing \
  --fsdp-state-dict-type SHARDED_STATE_DICT --checkpointing-steps 20 \
  --output-dir "$out/gpt_fsdp_small_bf16"
rm -rf "$out"/gpt_*/model "$out"/gpt_*/checkpoints "$out"/cnn_*/model

summarize "$([ "$dry" = 1 ] && echo dry_run || echo done)"
