#!/usr/bin/env bash
# save_state/load_state with 2 processes: each rank's RNG file, the world
# size in the manifest, an exact resume, and a refused resume with 1 process.
# Usage: dist_resume.sh AMPKIT CHECKPOINT_WORKER
set -euo pipefail
ampkit="$1" worker="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export AMPKIT_CONFIG_FILE="$dir/none.yaml" AMPKIT_RDZV_DIR="$dir/rdzv"
fail() { echo "dist_resume: $*" >&2; exit 1; }
launch() { "$ampkit" launch -q --num_processes 2 "$worker" "$@" > "$dir/log" 2>&1 || fail "$*: $(cat "$dir/log")"; }

launch train no 8 "$dir/straight.pt"
launch train no 4 "$dir/part.pt" --save-at 4 "$dir/ckpt"
for f in random_states_0.bin random_states_1.bin model.safetensors optimizer.bin sampler.bin; do
  grep -q "\"name\": \"$f\"" "$dir/ckpt/manifest.json" || fail "manifest lacks $f: $(cat "$dir/ckpt/manifest.json")"
done
grep -q '"world_size": 2' "$dir/ckpt/manifest.json" || fail "world_size not 2"
cmp -s "$dir/ckpt/random_states_0.bin" "$dir/ckpt/random_states_1.bin" && fail "both ranks saved the same RNG state"
launch train no 8 "$dir/resumed.pt" --resume "$dir/ckpt"
"$worker" compare "$dir/straight.pt" "$dir/resumed.pt" || fail "the resumed 2-process run differs from the straight one"
set +e
out="$("$worker" train no 8 "$dir/one.pt" --resume "$dir/ckpt" 2>&1)"; rc=$?
set -e
[ "$rc" -ne 0 ] && grep -q "saved by 2 processes, this run has 1" <<<"$out" || fail "1-process resume: $out"
echo "dist_resume: ok"
