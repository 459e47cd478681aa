#!/usr/bin/env bash
# Every key of accelerate's config file is acted on or refused, never
# silently ignored. The field list comes from the real accelerate in the
# cross-check venv (dataclasses.fields(ClusterConfig)), so a key a newer
# accelerate adds is checked too. For each key, a config file (2 CPU
# processes) gets that key with a value other than its default, and
# `ampkit launch --config_file F /usr/bin/env` runs with it:
#   - refused: the launch fails and its message names the key;
#   - acted on: the launch runs and what it prints or gives the processes
#     (rank 0's environment, the launcher's lines) differs from the run
#     without the key;
#   - anything else (runs, and nothing differs; or fails without naming the
#     key) is a FAIL.
# One line per key, "ok: ..." or "FAIL: ...".
#
# Usage: config_keys.sh AMPKIT_CLI PYTHON WORKDIR
# Exit: 0 all ok, 1 any FAIL, 77 (CTest skip) when PYTHON cannot import
# accelerate and CI is unset (with CI set that is a FAIL).
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 AMPKIT_CLI PYTHON WORKDIR" >&2
  exit 2
fi
cli=$1
python=$2
work=$3

source "$(dirname "$0")/require_accelerate.sh"
require_accelerate "$python"
mkdir -p "$work"
rm -f "$work"/key_*.yaml "$work"/base.yaml

# Writes base.yaml and key_<name>.yaml for every ClusterConfig field; a key
# whose meaning needs others (deepspeed_config needs DEEPSPEED) gets them.
"$python" - "$work" <<'EOF'
import dataclasses, sys, yaml
from accelerate.commands.config.config_args import ClusterConfig

work = sys.argv[1]
base = dict(compute_environment="LOCAL_MACHINE", distributed_type="MULTI_CPU",
            num_processes=2, use_cpu=True, mixed_precision="no", debug=False,
            machine_rank=0, num_machines=1, main_training_function="main")
# A value other than the default, and the keys it needs, per field.
chosen = {
    "compute_environment": ("AMAZON_SAGEMAKER", {}),
    "distributed_type": ("XLA", {}),
    "mixed_precision": ("bf16", {}),
    "use_cpu": (False, {}),
    "debug": (True, {}),
    "num_processes": (1, {}),
    "machine_rank": (1, {}),
    "num_machines": (2, {"main_process_ip": "127.0.0.1", "main_process_port": 29999}),
    "gpu_ids": ("0", {}),
    "main_process_ip": ("10.1.2.3", {}),
    "main_process_port": (29998, {}),
    "rdzv_backend": ("c10d", {}),
    "same_network": (True, {"num_machines": 2, "main_process_ip": "127.0.0.1",
                             "main_process_port": 29997}),
    "main_training_function": ("train", {}),
    "enable_cpu_affinity": (True, {}),
    "fp8_config": ({"backend": "TE"}, {}),
    "deepspeed_config": ({"zero_stage": 2, "gradient_accumulation_steps": 4},
                         {"distributed_type": "DEEPSPEED"}),
    "fsdp_config": ({"fsdp_sharding_strategy": "FULL_SHARD"}, {}),
    "megatron_lm_config": ({"megatron_lm_tp_degree": 2}, {}),
    "ipex_config": ({"ipex": True}, {}),
    "mpirun_config": ({"mpirun_hostfile": "/etc/hosts"}, {}),
    "downcast_bf16": (True, {}),
    "tpu_name": ("pod", {}),
    "tpu_zone": ("europe-west4-a", {}),
    "tpu_use_cluster": (True, {}),
    "tpu_use_sudo": (True, {}),
    "command_file": ("/etc/hostname", {}),
    "commands": (["echo hi"], {}),
    "tpu_vm": (["vm"], {}),
    "tpu_env": (["A=1"], {}),
    "dynamo_config": ({"dynamo_backend": "INDUCTOR"}, {}),
}
def fallback(field):
    """A non-default value for a field this list does not know yet."""
    t = str(field.type)
    if "bool" in t:
        return not (field.default is True)
    if "int" in t:
        return 2
    if "dict" in t:
        return {"x": 1}
    if "List" in t or "list" in t:
        return ["x"]
    return "x"
with open(f"{work}/base.yaml", "w") as f:
    yaml.safe_dump(base, f)
for field in dataclasses.fields(ClusterConfig):
    value, needs = chosen.get(field.name, (None, {}))
    if field.name not in chosen:
        value = fallback(field)
    config = dict(base, **needs)
    config[field.name] = value
    with open(f"{work}/key_{field.name}.yaml", "w") as f:
        yaml.safe_dump(config, f)
EOF

# What a launch prints and gives rank 0, without what changes run to run
# (the run id, and a port the launcher picked: Linux's ephemeral range).
launch() {  # CONFIG OUTPUT: exit status of the launch
  set +e
  "$cli" launch --join_timeout 3 --config_file "$1" /usr/bin/env 2>&1 |
    grep -v -e "^\[rank [1-9]" -e "AMPKIT_RUN_ID=" |
    sed -E 's/MASTER_PORT=(3[2-9][0-9]{3}|[4-6][0-9]{4})$/MASTER_PORT=picked/' > "$2"
  local rc=${PIPESTATUS[0]}
  set -e
  return "$rc"
}

failed=0
launch "$work/base.yaml" "$work/base.out" || {
  echo "FAIL: the base config does not launch: $(tail -3 "$work/base.out")"
  exit 1
}
for file in "$work"/key_*.yaml; do
  key=$(basename "$file" .yaml)
  key=${key#key_}
  if launch "$file" "$work/key.out"; then
    if cmp -s "$work/base.out" "$work/key.out"; then
      echo "FAIL: $key is ignored: the launch runs exactly as without it"
      failed=1
    else
      echo "ok: $key is acted on: $(diff "$work/base.out" "$work/key.out" | grep '^[<>]' | head -1 | cut -c1-120)"
    fi
  elif grep -q -- "$key" "$work/key.out"; then
    # Refused, or acted on and then stopped (two machines, the other
    # never joining), with a message that names the key.
    echo "ok: $key stops the launch, named: $(grep -m1 -- "$key" "$work/key.out" | cut -c1-160)"
  else
    echo "FAIL: $key fails the launch without naming it: $(tail -2 "$work/key.out")"
    failed=1
  fi
done
exit "$failed"
