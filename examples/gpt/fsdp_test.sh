#!/usr/bin/env bash
# examples/gpt on 2 processes (N with FSDP_TEST_PROCESSES), as DDP and with FSDP (each transformer block
# a unit): FULL_SHARD, and SHARD_GRAD_OP with activation checkpointing. With
# AdamW, gradient accumulation 2 and clipping (gradient_clipping 1.0), every
# FSDP run ends at DDP's weights within 1e-6, and holds at most
# (1/N + 5%) of DDP's bytes for parameters, gradients and optimizer state.
# A FULL_SHARD run resumed from its checkpoint half way (each process's
# optimizer shard, the whole model's weights) ends bit-identical to the run
# that never stopped.
# Usage: fsdp_test.sh GPT OUT_DIR [STEPS] [CONFIG]
set -euo pipefail
bin="$1" out="$2" steps="${3:-50}" config="${4:-tiny}"
n="${FSDP_TEST_PROCESSES:-2}"
rm -rf "$out" && mkdir -p "$out"
fail() { echo "gpt fsdp_test: $*" >&2; exit 1; }
args=(--config "$config" --max-steps "$steps" --threads 1 --eval-windows 16
      --sample-chars 0 --gradient-accumulation-steps 2 --batch-size 8
      --limit-train 4096)
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

run() {
  local name="$1" p pids=() rc=0
  shift
  p="$(port)"
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$p AMPKIT_GRADIENT_CLIPPING=${FSDP_TEST_CLIPPING-1.0} timeout 600 \
      "$bin" "${args[@]}" --output-dir "$out/$name" "$@" > "$out/$name.$r.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  [ "$rc" -eq 0 ] || fail "$name exited with $rc: $(tail -20 "$out/$name.0.log" "$out/$name.1.log")"
}

half=$((steps / 2))
run ddp
run full_shard --fsdp FULL_SHARD --checkpointing-steps "$half"
ckpt="$out/full_shard/checkpoints/checkpoint_$half"
[ -f "$ckpt/manifest.json" ] || fail "no checkpoint_$half"
mkdir -p "$out/resumed/checkpoints"
cp -r "$ckpt" "$out/resumed/checkpoints/"
run resumed --fsdp FULL_SHARD --resume-from-checkpoint latest
grep -q "resumed from .*checkpoint_$half at step $half" "$out/resumed.0.log" ||
  fail "did not resume from checkpoint_$half: $(cat "$out/resumed.0.log")"
cmp "$out/full_shard/model/model.safetensors" "$out/resumed/model/model.safetensors" ||
  fail "the resumed FULL_SHARD run's weights differ from the straight run's"
run shard_grad_op --fsdp SHARD_GRAD_OP --activation-checkpointing
grep -q "FSDP FULL_SHARD, 2 unit(s) and the root" "$out/full_shard.0.log" ||
  [ "$config" != tiny ] || fail "no FSDP line: $(cat "$out/full_shard.0.log")"

/usr/bin/python3 - "$out" "$n" <<'PY' || fail "the weights or the memory differ (above)"
import json, struct, sys
import numpy as np

out, n = sys.argv[1], int(sys.argv[2])

def load(run):
    with open(f"{out}/{run}/model/model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info
        a, b = info["data_offsets"]
        tensors[name] = np.frombuffer(data[a:b], dtype=np.float32)
    return tensors

def held(run):
    with open(f"{out}/{run}/summary.json") as f:
        return json.load(f)["held_bytes"]

ddp = load("ddp")
ok = True
for run in ("full_shard", "shard_grad_op"):
    got = load(run)
    if sorted(got) != sorted(ddp):
        print(f"{run}: other tensors than DDP's: {sorted(got)}")
        ok = False
        continue
    diff = max(float(np.abs(got[k] - ddp[k]).max()) for k in ddp)
    ratio = held(run) / held("ddp")
    print(f"{run}: max |weight - DDP's| = {diff:.3g}; held bytes "
          f"{held(run)} = {ratio:.3f} of DDP's {held('ddp')}")
    ok = ok and diff <= 1e-6 and ratio <= 1 / n + 0.05
sys.exit(0 if ok else 1)
PY
echo "gpt fsdp_test: ok ($config, $steps steps, $n processes)"
