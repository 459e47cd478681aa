# Sourced by the distributed bench scripts: `launch N CMD...` starts N
# processes with torchrun's variables on a free loopback port and waits for
# all of them (the first non-zero exit status is returned).
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
launch() {
  local n="$1"; shift
  local p; p="$(port)"
  local pids=()
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$p "$@" &
    pids+=($!)
  done
  local rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  return $rc
}
