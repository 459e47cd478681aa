#!/usr/bin/env bash
# Runs the unchanged example as N processes on this machine with torchrun's
# variables, every wait bounded, and checks that its summary says N.
# Usage: run_processes.sh N EXAMPLE OUTPUT_DIR [EXAMPLE ARGS...]
set -euo pipefail
n="$1" exe="$2" out="$3"
shift 3
port="$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')"
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$port timeout 600 "$exe" --output-dir "$out" "$@" &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
[ "$rc" -eq 0 ] || { echo "run_processes: a process exited with $rc" >&2; exit "$rc"; }
grep -q "\"num_processes\": $n" "$out/summary.json" ||
  { echo "run_processes: $out/summary.json does not say $n processes" >&2; exit 1; }
