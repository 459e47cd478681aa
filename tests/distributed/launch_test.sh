#!/usr/bin/env bash
# ampkit launch end to end. Usage: launch_test.sh AMPKIT DIST_WORKER
set -euo pipefail
ampkit="$1" worker="$2"
dir="$(mktemp -d)"
trap 'pkill -KILL -f "$dir/" 2>/dev/null || true; rm -rf "$dir"' EXIT
export AMPKIT_CONFIG_FILE="$dir/none.yaml" AMPKIT_RDZV_DIR="$dir/rdzv"
fail() { echo "launch_test: $*" >&2; exit 1; }
cat > "$dir/w.sh" <<'W'
#!/usr/bin/env bash
echo "env RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE MASTER_ADDR=$MASTER_ADDR MP=${AMPKIT_MIXED_PRECISION:-} OMP=${OMP_NUM_THREADS:-}"
echo "more CVD=${CUDA_VISIBLE_DEVICES:-} ZS=${AMPKIT_ZERO_STAGE:-} GC=${AMPKIT_GRADIENT_CLIPPING:-}"
case "${1:-}" in
  fail7) if [ "$RANK" = 1 ]; then echo "rank one gives up"; exit 7; fi; sleep 61.5 ;;
  sleep) sleep 61.5 ;;
  count) echo run >> "$2"; [ "$RANK" = 0 ] && [ "$(wc -l < "$2")" -lt 4 ] && exit 3; exit 0 ;;
esac
W
chmod +x "$dir/w.sh"
alive() { pgrep -f "$dir/w.sh" >/dev/null || pgrep -f "sleep 61.5" >/dev/null; }
# Waits up to 10 s for every worker and its child to be gone: a busy machine
# may take a while to reap them, and a fixed sleep would flake.
gone() { for _ in $(seq 100); do alive || return 0; sleep 0.1; done; return 1; }

# 1. Each worker sees its own environment, output prefixed with its rank;
#    the cores are shared among the processes (accelerate launch's
#    OMP_NUM_THREADS), or --num_cpu_threads_per_process says how many.
threads=$(( $(nproc) / 2 )); [ "$threads" -ge 1 ] || threads=1
out="$(env -u OMP_NUM_THREADS "$ampkit" launch --num_processes 2 --mixed-precision bf16 "$dir/w.sh" 2>&1)"
for r in 0 1; do
  grep -q "^\[rank $r\] env RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MP=bf16 OMP=$threads$" <<<"$out" ||
    fail "rank $r's environment or prefix: $out"
done
out3="$("$ampkit" launch --num_processes 2 --num_cpu_threads_per_process 3 "$dir/w.sh" 2>&1)"
grep -q "^\[rank 1\] env .* OMP=3$" <<<"$out3" || fail "--num_cpu_threads_per_process 3: $out3"
out5="$(OMP_NUM_THREADS=5 "$ampkit" launch --num_processes 2 "$dir/w.sh" 2>&1)"
grep -q "^\[rank 0\] env .* OMP=5$" <<<"$out5" || fail "an OMP_NUM_THREADS already set is passed on: $out5"
grep -q "using the defaults num_machines=1" <<<"$out" || fail "no warning about defaults: $out"

# 2. A worker exiting 7: the launcher exits 7 within 10 s, says which rank
#    and how, shows its last lines, and leaves no worker running.
start=$(date +%s)
set +e
out="$("$ampkit" launch --num_processes 2 "$dir/w.sh" fail7 2>&1)"
rc=$?
set -e
[ "$rc" -eq 7 ] || fail "exit code $rc, expected 7: $out"
[ $(( $(date +%s) - start )) -lt 10 ] || fail "took longer than 10 s"
grep -q "rank 1 failed (exit code 7)" <<<"$out" || fail "no failure line: $out"
grep -q "\[rank 1\] rank one gives up" <<<"$out" || fail "no last lines: $out"
gone || fail "a worker outlived the launcher"

# 3. SIGTERM to the launcher reaches the workers; none is left.
"$ampkit" launch --num_processes 2 "$dir/w.sh" sleep > "$dir/term.log" 2>&1 &
launcher=$!
for _ in $(seq 200); do [ "$(grep -c '^\[rank' "$dir/term.log")" -ge 2 ] && break; sleep 0.1; done
kill -TERM "$launcher"
set +e; wait "$launcher"; rc=$?; set -e
[ "$rc" -eq 143 ] || fail "SIGTERM: exit code $rc, expected 143: $(cat "$dir/term.log")"
gone || fail "a worker survived SIGTERM to the launcher"

# 4. SIGKILL to the launcher: the workers (PR_SET_PDEATHSIG) and what they
#    started (the reaper, here each worker's `sleep`) are killed too.
"$ampkit" launch --num_processes 2 "$dir/w.sh" sleep > "$dir/kill.log" 2>&1 &
launcher=$!
for _ in $(seq 200); do [ "$(grep -c '^\[rank' "$dir/kill.log")" -ge 2 ] && break; sleep 0.1; done
pgrep -f "sleep 61.5" >/dev/null || fail "the workers' children did not start: $(cat "$dir/kill.log")"
kill -KILL "$launcher"
wait "$launcher" 2>/dev/null || true
gone || fail "a worker or its child outlived a SIGKILLed launcher: $(pgrep -af 'w.sh|sleep 61.5')"

# 5. --log_dir: one log per rank, not on the console unless --tee.
"$ampkit" launch -q --num_processes 2 --log_dir "$dir/logs" "$dir/w.sh" > "$dir/quiet.log" 2>&1 ||
  fail "--log_dir run: $(cat "$dir/quiet.log")"
for r in 0 1; do
  grep -q "^env RANK=$r WORLD_SIZE=2 " "$dir/logs/rank_$r.log" || fail "rank_$r.log: $(cat "$dir/logs/rank_$r.log")"
done
! grep -q "env RANK" "$dir/quiet.log" || fail "without --tee the lines reached the console: $(cat "$dir/quiet.log")"
"$ampkit" launch -q --num_processes 2 --log-dir "$dir/tee" --tee "$dir/w.sh" > "$dir/tee.log" 2>&1 || fail "--tee run"
grep -q "^\[rank 1\] env RANK=1 " "$dir/tee.log" || fail "--tee did not print: $(cat "$dir/tee.log")"
grep -q "^env RANK=1 " "$dir/tee/rank_1.log" || fail "--tee did not log"
touch "$dir/file"
set +e
out="$("$ampkit" launch --num_processes 2 --log_dir "$dir/file/logs" "$dir/w.sh" 2>&1)"; rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "cannot write the worker logs into --log_dir $dir/file/logs" <<<"$out" ||
  fail "an unwritable --log_dir: rc $rc: $out"

# 6. --max_restarts restarts the whole group until it succeeds.
"$ampkit" launch --num_processes 2 --max_restarts 3 "$dir/w.sh" count "$dir/count" > "$dir/restart.log" 2>&1 ||
  fail "restarts did not end in success: $(cat "$dir/restart.log")"
grep -q "restarting the group (1 of 3)" "$dir/restart.log" || fail "no restart line"
[ "$(wc -l < "$dir/count")" -ge 4 ] || fail "the group did not restart"

# 7. A real distributed program, and two launchers acting as two machines
#    forming one group of 4.
"$ampkit" launch -q --num_processes 2 "$worker" metrics > "$dir/m.log" 2>&1 || fail "metrics: $(cat "$dir/m.log")"
grep -q "\[rank 0\] metrics ok" "$dir/m.log" || fail "metrics: $(cat "$dir/m.log")"
port="$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')"
for m in 0 1; do
  "$ampkit" launch -q --num_processes 4 --num_machines 2 --machine_rank $m \
    --main_process_ip 127.0.0.1 --main_process_port "$port" "$worker" metrics > "$dir/m$m.log" 2>&1 &
done
wait %1 || fail "machine 0: $(cat "$dir/m0.log")"
wait %2 || fail "machine 1: $(cat "$dir/m1.log")"
grep -q "\[rank 0\] metrics ok" "$dir/m0.log" || fail "group of 4: $(cat "$dir/m0.log")"
# A rendezvous port another program holds: machine 0's launcher says so at
# once, naming the flag for another port.
python3 -c 'import socket,time;s=socket.socket();s.bind(("",0));s.listen()
print(s.getsockname()[1],flush=True);time.sleep(120)' > "$dir/held" &
holder=$!
for _ in $(seq 100); do [ -s "$dir/held" ] && break; sleep 0.1; done
held="$(cat "$dir/held")"
set +e
out="$("$ampkit" launch -q --num_processes 2 --num_machines 2 --machine_rank 0 \
  --main_process_ip 127.0.0.1 --main_process_port "$held" "$worker" metrics 2>&1)"; rc=$?
set -e
kill "$holder"
[ "$rc" -ne 0 ] && grep -q "machine 0 could not open the rendezvous port $held: another program holds it" <<<"$out" ||
  fail "a held rendezvous port: rc $rc: $out"
# 8. An accelerate DeepSpeed config: its ZeRO stage and clipping reach the
#    workers, and its gpu_ids become CUDA_VISIBLE_DEVICES, as accelerate
#    launch does; --multi_gpu without a process count and without a GPU
#    says so instead of starting one process.
cat > "$dir/ds.yaml" <<'Y'
distributed_type: DEEPSPEED
deepspeed_config:
  zero_stage: 1
  gradient_clipping: 0.5
gpu_ids: 0,1
num_processes: 2
use_cpu: true
Y
out="$("$ampkit" launch --config_file "$dir/ds.yaml" "$dir/w.sh" 2>&1)" || fail "DeepSpeed config: $out"
grep -q "^\[rank 1\] more CVD=0,1 ZS=1 GC=0.5$" <<<"$out" || fail "DeepSpeed config's settings: $out"
out="$("$ampkit" launch --config_file "$dir/ds.yaml" --zero_stage 2 "$dir/w.sh" 2>&1)" || fail "--zero_stage: $out"
grep -q "^\[rank 0\] more CVD=0,1 ZS=2 GC=0.5$" <<<"$out" || fail "--zero_stage over the config: $out"
set +e
out="$(env -u CUDA_VISIBLE_DEVICES "$ampkit" launch --multi_gpu "$dir/w.sh" 2>&1)"; rc=$?
set -e
if [ "$rc" -ne 0 ]; then  # no GPU here
  grep -q "multi_gpu starts one process per GPU, but this machine has no CUDA device" <<<"$out" ||
    fail "--multi_gpu without a GPU: rc $rc: $out"
else  # one process per GPU
  grep -q "^\[rank 0\] env .* WORLD_SIZE=$(nvidia-smi -L | wc -l) " <<<"$out" || fail "--multi_gpu: $out"
fi
# 9. Bounds, checked before anything starts: more processes than usable
#    cores (without --oversubscribe), beyond ulimit -u (always), a port out
#    of range, --cpu with --multi_gpu, accumulation 0, a missing or empty
#    explicit config file.
refused() {  # refused WHAT EXPECTED_TEXT ARGS...: exit != 0 at once, saying it
  local what="$1" text="$2"; shift 2
  local start=$SECONDS rc=0
  out="$("$ampkit" launch "$@" 2>&1)" || rc=$?
  [ "$rc" -ne 0 ] || fail "$what was accepted: $out"
  grep -q -- "$text" <<<"$out" || fail "$what: no '$text' in: $out"
  [ $((SECONDS - start)) -le 5 ] || fail "$what took $((SECONDS - start)) s to refuse"
  ! alive || fail "$what started workers"
}
cores=$(nproc)
refused "100000 processes" "usable cores" --cpu --num_processes 100000 "$dir/w.sh" sleep
refused "99999999999 processes" "usable cores" --cpu --num_processes 99999999999 "$dir/w.sh" sleep
refused "$((cores + 1)) processes on $cores cores" "or --oversubscribe" --cpu --num_processes $((cores + 1)) "$dir/w.sh"
out="$("$ampkit" launch -q --cpu --oversubscribe --num_processes $((cores + 1)) "$dir/w.sh" 2>&1)" ||
  fail "--oversubscribe: $out"
grep -q "^\[rank $cores\] env" <<<"$out" || fail "--oversubscribe started no rank $cores: $out"
out="$(ulimit -u 40 2>/dev/null && "$ampkit" launch --cpu --oversubscribe --num_processes 50 "$dir/w.sh" 2>&1)" && rc=0 || rc=$?
[ "$rc" -ne 0 ] && grep -q "ulimit -u" <<<"$out" || fail "50 processes under ulimit -u 40: rc $rc: $out"
refused "port 70000" "main_process_port must be 0 (pick a free port) or 1-65535, got 70000" \
  --cpu --num_processes 2 --main_process_port 70000 "$dir/w.sh"
refused "--cpu --multi_gpu" "ask for GPUs and for none" --cpu --multi_gpu "$dir/w.sh"
refused "2 processes on 1 GPU" "which has 1 GPUs: they would share them" --gpu_ids 0 --num_processes 2 "$dir/w.sh"
refused "accumulation 0" "must be a number > 0, got 0" --cpu --gradient_accumulation_steps 0 "$dir/w.sh"
refused "a missing --config_file" "does not exist" --config_file "$dir/missing.yaml" "$dir/w.sh"
: > "$dir/empty.yaml"
refused "an empty config file" "holds no settings" --config_file "$dir/empty.yaml" "$dir/w.sh"

# 10. enable_cpu_affinity (flag or config file): each rank runs on its own,
#     disjoint share of the usable cores, with OMP_NUM_THREADS its size.
cat > "$dir/cores.sh" <<'W'
#!/usr/bin/env bash
echo "cores $(grep Cpus_allowed_list /proc/self/status | cut -f2) OMP=$OMP_NUM_THREADS"
W
chmod +x "$dir/cores.sh"
if [ "$(nproc)" -ge 2 ]; then
  printf 'distributed_type: MULTI_CPU\nnum_processes: 2\nuse_cpu: true\nenable_cpu_affinity: true\n' > "$dir/affinity.yaml"
  for how in "--enable_cpu_affinity --num_processes 2" "--config_file $dir/affinity.yaml"; do
    # shellcheck disable=SC2086
    out="$(env -u OMP_NUM_THREADS "$ampkit" launch --cpu $how "$dir/cores.sh" 2>&1)" || fail "affinity ($how): $out"
    c0=$(sed -n 's/^\[rank 0\] cores \([0-9,-]*\) OMP=.*/\1/p' <<<"$out")
    c1=$(sed -n 's/^\[rank 1\] cores \([0-9,-]*\) OMP=.*/\1/p' <<<"$out")
    [ -n "$c0" ] && [ -n "$c1" ] && [ "$c0" != "$c1" ] || fail "affinity ($how): ranks not pinned apart: $out"
    expand() { python3 -c 'import sys; print(" ".join(str(c) for p in sys.argv[1].split(",") for c in (range(int(p.split("-")[0]), int(p.split("-")[-1]) + 1))))' "$1"; }
    both="$(expand "$c0") $(expand "$c1")"
    [ "$(tr ' ' '\n' <<<"$both" | sort | uniq -d)" = "" ] || fail "affinity ($how): shared cores $c0 / $c1"
    n0=$(expand "$c0" | wc -w)
    grep -q "^\[rank 0\] cores $c0 OMP=$n0$" <<<"$out" || fail "affinity ($how): OMP_NUM_THREADS is not the share: $out"
    grep -q "rank 1 pinned to cores $c1 (enable_cpu_affinity)" <<<"$out" || fail "affinity ($how): the plan is not shown: $out"
  done
  out="$(env -u OMP_NUM_THREADS "$ampkit" launch --cpu --num_processes 2 "$dir/cores.sh" 2>&1)"
  grep -q "pinned" <<<"$out" && fail "pinned without enable_cpu_affinity: $out"
fi
echo "launch_test: ok"
