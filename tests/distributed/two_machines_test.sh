#!/usr/bin/env bash
# Two machines for real: two network namespaces joined by a veth pair
# (10.77.0.1 and 10.77.0.2, no shared loopback), one process each, started
# with `ampkit launch --num_machines 2` and no GLOO_SOCKET_IFNAME. ampkit
# must find the interface toward the master by itself, train, and end with
# the weights of a one-machine two-process run of the same command. Then
# the launchers' agreement (distributed/agent.h), with small workers in bash:
#  - a machine that never comes is named by the other after --join_timeout;
#  - a worker failing on machine 1 stops machine 0's workers at once, and
#    with --max_restarts 1 both machines restart together and finish;
#  - a machine that hangs (its launcher stopped) is named after
#    --heartbeat_timeout, and it stops itself once it runs again.
# Skipped (77) where this user cannot make network namespaces (not root, no
# `ip netns`).
# Usage: two_machines_test.sh AMPKIT FASHION_MNIST
set -uo pipefail
ampkit="$1" demo="$2"
skip() { echo "two_machines_test: $*; skipped"; exit 77; }
fail() { echo "two_machines_test: FAIL: $*"; exit 1; }
tag="$$"
out="$(mktemp -d)"
on_exit() { rm -rf "$out"; }
source "$(dirname "$0")/netns_pair.sh"
netns_pair "ampkitA$tag" "ampkitB$tag" "vaA$tag" "vaB$tag" 10.77.0

port=$((29600 + tag % 300))
# Each machine writes checkpoints into its own folder (no shared
# filesystem): machine 1's local main process writes its machine's copy.
train=(--epochs 1 --limit-train 1200 --limit-test 200 --threads 1 --batch-size 64
  --checkpointing-steps 4)
machine() {  # NAMESPACE RANK OUTPUT
  env -u GLOO_SOCKET_IFNAME -u NCCL_SOCKET_IFNAME ip netns exec "$1" \
    "$ampkit" launch --cpu --num_machines 2 --machine_rank "$2" --num_processes 2 \
    --num_cpu_threads_per_process 1 --main_process_ip 10.77.0.1 \
    --main_process_port "$port" "$demo" --output-dir "$3" "${train[@]}"
}
start=$SECONDS
machine "$na" 0 "$out/m0" > "$out/m0.log" 2>&1 &
pa=$!
machine "$nb" 1 "$out/m1" > "$out/m1.log" 2>&1 &
pb=$!
wait "$pa"; ra=$?
wait "$pb"; rb=$?
echo "two machines: exit codes $ra and $rb after $((SECONDS - start)) s"
if [ "$ra" -ne 0 ] || [ "$rb" -ne 0 ]; then
  tail -20 "$out/m0.log" "$out/m1.log"
  fail "a machine failed"
fi
grep -q "network.*10.77.0.1 on $va (the route toward MASTER_ADDR 10.77.0.1)" "$out/m0.log" ||
  { cat "$out/m0.log"; fail "machine 0's start-up table does not show its interface"; }
# One machine, two processes, the same arguments: the final weights must
# equal machine 0's bit for bit.
same_as_one_machine() {  # REFERENCE MACHINE0_OUTPUT WHAT ARGS...
  local ref="$1" got="$2" what="$3"
  shift 3
  "$ampkit" launch --quiet --cpu --num_processes 2 --num_cpu_threads_per_process 1 \
    "$demo" --output-dir "$out/$ref" "$@" > "$out/$ref.log" 2>&1 ||
    { tail -20 "$out/$ref.log"; fail "the one-machine reference run $ref failed"; }
  cmp "$out/$got/model/model.safetensors" "$out/$ref/model/model.safetensors" ||
    fail "$what: other weights than one machine with two processes"
}
same_as_one_machine ref m0 "two machines" "${train[@]}"
for m in m0 m1; do
  ls "$out/$m"/checkpoints/*/manifest.json > /dev/null 2>&1 ||
    { ls -R "$out/$m"; fail "machine ${m#m} has no complete checkpoint in its own folder"; }
done
echo "two_machines_test: training ok (2 machines x 1 process without GLOO_SOCKET_IFNAME = 1 machine x 2 processes, bit for bit)"

port=$((port + 1))
launcher() {  # NAMESPACE RANK [LAUNCH OPTIONS...] PROGRAM...
  local ns="$1" rank="$2"
  shift 2
  ip netns exec "$ns" "$ampkit" launch --quiet --cpu --num_machines 2 \
    --machine_rank "$rank" --num_processes 2 --main_process_ip 10.77.0.1 \
    --main_process_port "$port" "$@"
}

# A machine that never comes.
start=$SECONDS
launcher "$na" 0 --join_timeout 2 /bin/true > "$out/alone.log" 2>&1 &&
  fail "machine 0 ran without machine 1"
grep -q "machine 1 of 2 did not join at 10.77.0.1:$port within 2" "$out/alone.log" ||
  { cat "$out/alone.log"; fail "the missing machine is not named"; }
(( SECONDS - start <= 10 )) || fail "machine 0 took $((SECONDS - start)) s to give up (--join_timeout 2)"
echo "two_machines_test: a missing machine is named after $((SECONDS - start)) s"

# A worker fails on machine 1: machine 0's worker (sleeping 60 s) is
# stopped, and both machines start round 1 together.
cat > "$out/worker.sh" <<EOF
if [ ! -e "$out/started\$RANK" ]; then
  touch "$out/started\$RANK"
  if [ "\$RANK" = 1 ]; then sleep 1; echo "rank 1 gives up"; exit 3; fi
  sleep 60
fi
echo "rank \$RANK finished"
EOF
start=$SECONDS
launcher "$na" 0 --max_restarts 1 bash "$out/worker.sh" > "$out/r0.log" 2>&1 &
pa=$!
launcher "$nb" 1 --max_restarts 1 bash "$out/worker.sh" > "$out/r1.log" 2>&1 &
pb=$!
wait "$pa"; ra=$?
wait "$pb"; rb=$?
took=$((SECONDS - start))
[ "$ra" -eq 0 ] && [ "$rb" -eq 0 ] ||
  { tail "$out/r0.log" "$out/r1.log"; fail "restart: exit codes $ra and $rb"; }
grep -q "machine 1: rank 1 failed (exit code 3): rank 1 gives up" "$out/r0.log" ||
  { cat "$out/r0.log"; fail "machine 0 does not say why it stopped"; }
grep -q "restarting the group (1 of 1)" "$out/r0.log" ||
  { cat "$out/r0.log"; fail "machine 0 did not restart with machine 1"; }
grep -q "rank 0 finished" "$out/r0.log" || { cat "$out/r0.log"; fail "rank 0 did not finish in round 1"; }
(( took <= 20 )) || fail "the restart took $took s (rank 0 slept instead of stopping?)"
echo "two_machines_test: a failure on machine 1 restarted both machines; done in $took s"

# Machine 1 hangs: machine 0 names it after --heartbeat_timeout 3.
launcher "$na" 0 --join_timeout 60 --heartbeat_timeout 3 sleep 60 > "$out/h0.log" 2>&1 &
pa=$!
launcher "$nb" 1 --join_timeout 60 --heartbeat_timeout 3 sleep 60 > "$out/h1.log" 2>&1 &
# Hung only once both machines joined and machine 1's worker runs (before
# the join, --join_timeout bounds the wait, tested above).
for _ in $(seq 600); do
  for p in $(ip netns pids "$nb"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = sleep ] && break 2
  done
  sleep 0.1
done
launcher_pid=$(pgrep -f -o -- "--machine_rank 1 .*--main_process_port $port --join_timeout 60 --heartbeat_timeout 3")
[ -n "$launcher_pid" ] || fail "cannot find machine 1's launcher"
kill -STOP "$launcher_pid"
start=$SECONDS
wait "$pa"; ra=$?
took=$((SECONDS - start))
kill -CONT "$launcher_pid"
[ "$ra" -ne 0 ] || fail "machine 0 succeeded although machine 1 hung"
grep -q "machine 1 sent no heartbeat for" "$out/h0.log" ||
  { cat "$out/h0.log"; fail "machine 0 does not name the silent machine"; }
(( took <= 10 )) || fail "machine 0 stopped $took s after machine 1 hung (--heartbeat_timeout 3)"
start=$SECONDS
while kill -0 "$launcher_pid" 2>/dev/null && (( SECONDS - start <= 15 )); do sleep 0.2; done
kill -0 "$launcher_pid" 2>/dev/null && fail "machine 1 ran on 15 s after it woke, machine 0 gone"
grep -q "stopping this machine's workers" "$out/h1.log" ||
  { cat "$out/h1.log"; fail "machine 1 does not say why it stopped"; }
echo "two_machines_test: a hung machine is named by the other after $took s; it stops itself $((SECONDS - start)) s after it wakes"

# A worker killed mid-run; each machine has its own output folder; with
# --max_restarts 1 both machines restart, resume from the newest checkpoint
# they both have, and end with the weights of an uninterrupted run.
port=$((port + 1))
long=(--epochs 2 --limit-train 2000 --limit-test 200 --threads 1 --batch-size 64
  --checkpointing-steps 5 --resume-from-checkpoint latest)
kmachine() {  # NAMESPACE RANK OUTPUT
  ip netns exec "$1" "$ampkit" launch --quiet --cpu --num_machines 2 --machine_rank "$2" \
    --num_processes 2 --num_cpu_threads_per_process 1 --main_process_ip 10.77.0.1 \
    --main_process_port "$port" --max_restarts 1 "$demo" --output-dir "$3" "${long[@]}"
}
kmachine "$na" 0 "$out/k0" > "$out/k0.log" 2>&1 &
pa=$!
kmachine "$nb" 1 "$out/k1" > "$out/k1.log" 2>&1 &
pb=$!
for _ in $(seq 1200); do
  ls "$out"/k1/checkpoints/*/manifest.json > /dev/null 2>&1 && break
  sleep 0.05
done
pkill -KILL -f -- "^$demo --output-dir $out/k1 " || fail "no worker to kill on machine 1"
killed=$(date +%s.%N)
resumed=""
while kill -0 "$pa" 2>/dev/null; do
  if [ -z "$resumed" ] && grep -q "resumed from" "$out/k0.log"; then resumed=$(date +%s.%N); fi
  sleep 0.05
done
if [ -z "$resumed" ] && grep -q "resumed from" "$out/k0.log"; then resumed=$(date +%s.%N); fi
wait "$pa"; ra=$?
wait "$pb"; rb=$?
[ "$ra" -eq 0 ] && [ "$rb" -eq 0 ] ||
  { tail -20 "$out/k0.log" "$out/k1.log"; fail "kill and restart: exit codes $ra and $rb"; }
grep -q "restarting the group (1 of 1)" "$out/k0.log" ||
  { cat "$out/k0.log"; fail "machine 0 did not restart after machine 1's worker was killed"; }
grep -q "resumed from" "$out/k1.log" ||
  { cat "$out/k1.log"; fail "machine 1 did not resume from its own checkpoint"; }
same_as_one_machine kref k0 "killed, restarted and resumed on two machines" "${long[@]}"
echo "two_machines_test: a worker killed on machine 1 restarted both machines; resumed $(awk "BEGIN { printf \"%.1f\", $resumed - $killed }") s after the kill; weights equal an uninterrupted run"
echo "two_machines_test: ok"
