#!/usr/bin/env bash
# save_state/load_state with 2 processes: each rank's RNG file, the world
# size in the manifest, an exact resume; then a 2-process checkpoint, DDP and
# ZeRO-2, resumed on 1 and on 3 processes: every sample of the epoch trained
# on once (from each process's sample log), and the Adam state re-split
# exactly (the processes' dumps joined in rank order).
# Usage: dist_resume.sh AMPKIT CHECKPOINT_WORKER
set -euo pipefail
ampkit="$1" worker="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export AMPKIT_CONFIG_FILE="$dir/none.yaml" AMPKIT_RDZV_DIR="$dir/rdzv"
fail() { echo "dist_resume: $*" >&2; exit 1; }
# launch [--num_processes N --oversubscribe] WORKER_ARGS...: 2 processes unless told.
launch() {
  local procs=(--num_processes 2)
  [ "$1" = --num_processes ] && { procs=("$1" "$2" "$3"); shift 3; }
  "$ampkit" launch -q "${procs[@]}" "$worker" "$@" > "$dir/log" 2>&1 || fail "$*: $(cat "$dir/log")"
}

launch train no 8 "$dir/straight.pt"
launch train no 4 "$dir/part.pt" --save-at 4 "$dir/ckpt"
for f in random_states_0.bin random_states_1.bin model.safetensors optimizer.bin sampler.bin; do
  grep -q "\"name\": \"$f\"" "$dir/ckpt/manifest.json" || fail "manifest lacks $f: $(cat "$dir/ckpt/manifest.json")"
done
grep -q '"world_size": 2' "$dir/ckpt/manifest.json" || fail "world_size not 2"
cmp -s "$dir/ckpt/random_states_0.bin" "$dir/ckpt/random_states_1.bin" && fail "both ranks saved the same RNG state"
launch train no 8 "$dir/resumed.pt" --resume "$dir/ckpt"
"$worker" compare "$dir/straight.pt" "$dir/resumed.pt" || fail "the resumed 2-process run differs from the straight one"

# Samples trained on by the saving run and a resumed one: each of the 100
# once, plus the resumed run's padding (duplicates of the epoch's start).
check_samples() {  # SAVED_PREFIX RESUMED_PREFIX PADDING WHAT
  local all
  all="$(cat "$1".* "$2".* | sort -n)"
  [ "$(uniq <<<"$all" | wc -l)" -eq 100 ] && [ "$(uniq <<<"$all" | head -1)" -eq 0 ] &&
    [ "$(uniq <<<"$all" | tail -1)" -eq 99 ] || fail "$4: not every sample seen: $(uniq <<<"$all" | tr '\n' ' ')"
  [ "$(wc -l <<<"$all")" -eq $((100 + $3)) ] || fail "$4: $(wc -l <<<"$all") samples trained on, expected $((100 + $3))"
}
for zero in 0 2; do
  d="$dir/z$zero"
  mkdir -p "$d"
  # ZeRO with two param groups: the shards cut across groups.
  groups=()
  [ "$zero" -gt 0 ] && groups=(--two-groups)
  launch train no 2 "$d/part.pt" --save-at 2 "$d/ckpt" --zero "$zero" "${groups[@]}" --sample-log "$d/log_saved" --dump-optimizer "$d/state"
  # 1 process: the 36 samples left, no padding.
  out="$("$worker" train no 1000 "$d/one.pt" --resume "$d/ckpt" --zero "$zero" "${groups[@]}" --one-epoch \
    --sample-log "$d/log_one" --dump-optimizer "$d/one_state" 2>&1)" || fail "zero $zero, 1-process resume: $out"
  grep -q "saved by 2 processes and resumes on 1" <<<"$out" || fail "zero $zero, 1 process: no notice: $out"
  check_samples "$d/log_saved" "$d/log_one" 0 "zero $zero, 1 process"
  # 3 processes (on 2 cores here): 36 samples left, padded to 48 (global
  # batch 24).
  launch --num_processes 3 --oversubscribe train no 1000 "$d/three.pt" --resume "$d/ckpt" --zero "$zero" "${groups[@]}" --one-epoch --sample-log "$d/log_three" --dump-optimizer "$d/three_state"
  check_samples "$d/log_saved" "$d/log_three" 12 "zero $zero, 3 processes"
  if [ "$zero" -eq 0 ]; then
    "$worker" compare-shards "$d/state" 1 "$d/one_state" 1 || fail "DDP: the optimizer state differs after a 1-process resume"
    "$worker" compare-shards "$d/state" 1 "$d/three_state" 1 || fail "DDP: the optimizer state differs after a 3-process resume"
  else
    "$worker" compare-shards "$d/state" 2 "$d/one_state" 1 || fail "ZeRO-2: the shards are not re-split exactly for 1 process"
    "$worker" compare-shards "$d/state" 2 "$d/three_state" 3 || fail "ZeRO-2: the shards are not re-split exactly for 3 processes"
  fi
done
# ZeRO-2 saved by 1 process (one shard file, still a partition) resumed on
# 2: re-split, not loaded whole into each half.
d="$dir/z2one"
mkdir -p "$d"
"$worker" train no 2 "$d/part.pt" --save-at 2 "$d/ckpt" --zero 2 --two-groups --dump-optimizer "$d/state" > "$dir/log" 2>&1 ||
  fail "1-process ZeRO-2 save: $(cat "$dir/log")"
launch train no 1000 "$d/two.pt" --resume "$d/ckpt" --zero 2 --two-groups --one-epoch --dump-optimizer "$d/two_state"
"$worker" compare-shards "$d/state" 1 "$d/two_state" 2 || fail "ZeRO-2: a 1-process checkpoint is not re-split exactly for 2 processes"
echo "dist_resume: ok"
