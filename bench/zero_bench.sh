#!/usr/bin/env bash
# ZeRO against DDP on the CPU (Gloo), each figure beside its DDP peer:
#  1. memory: the largest optimizer-state and gradient bytes a process holds
#     at the step, counted from its tensors, with 1, 2 and 4 processes, for
#     zero_stage 0 (DDP), 1 and 2; the bound is 1/N + 5% of DDP's;
#  2. step time at 2 processes: DDP, stage 1 and stage 2 alternating, 3
#     rounds, medians (one intra-op thread per process).
# Usage: bash bench/zero_bench.sh [BUILD_DIR] [WIDTH] [BUCKET_MB]
# (BUCKET_MB: bucket_cap_mb for DDP's all-reduce and ZeRO-2's
# reduce-scatter alike, 25 by default)
set -euo pipefail
build="${1:-build}"
width="${2:-1024}"
bucket="${3:-25}"
exe="$build/bench/zero_bench"
source "$(dirname "$0")/launch.sh"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for n in 1 2 4; do
  for stage in 0 1 2; do
    launch "$n" timeout 600 "$exe" "$stage" "$width" 3 "$bucket" | sed 's/^/memory /' >>"$out"
  done
done
for round in 1 2 3; do
  for stage in 0 1 2; do
    launch 2 timeout 600 "$exe" "$stage" "$width" 20 "$bucket" | sed 's/^/time /' >>"$out"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
memory, time = {}, {}
for line in open(sys.argv[1]):
    kind, _, text = line.partition(" ")
    d = json.loads(text)
    if kind == "memory":
        memory[(d["processes"], d["stage"])] = d
    else:
        time.setdefault(d["stage"], []).append(d["ms_per_step"])
print(f"MLP, {next(iter(memory.values()))['parameters']:,} parameters, AdamW, fp32")
print("processes stage  optimizer state (x DDP)    gradients (x DDP)     bound")
ok = True
for (n, s), d in sorted(memory.items()):
    ddp = memory[(n, 0)]
    rs = d["state_bytes"] / ddp["state_bytes"]
    rg = d["gradient_bytes"] / ddp["gradient_bytes"]
    bound = 1 / n + 0.05
    within = s == 0 or (rs <= bound and (s == 1 or rg <= bound))
    ok = ok and within
    print(f"{n:9d} {s:5d}  {d['state_bytes']/2**20:8.2f} MiB ({rs:.3f})"
          f"  {d['gradient_bytes']/2**20:8.2f} MiB ({rg:.3f})"
          f"  {'-' if s == 0 else ('<= %.3f ok' % bound if within else '> %.3f MISSED' % bound)}")
print("stage 2's reduce-scatter:", next(d for d in memory.values()
      if d["processes"] > 1)["reduce_scatter"])
ddp = statistics.median(time[0])
for s in (0, 1, 2):
    m = statistics.median(time[s])
    print(f"step time, 2 processes, stage {s}: {m:.1f} ms (median of 3; "
          f"{m / ddp:.2f}x DDP)")
sys.exit(0 if ok else 1)
PY
