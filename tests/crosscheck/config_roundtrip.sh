#!/usr/bin/env bash
# Cross-check of the config file format against the real accelerate:
#  a. files ampkit writes (`ampkit config default`, and `ampkit config` with
#     answers piped for multi-CPU and for DeepSpeed ZeRO-2) load with
#     accelerate's own loader (load_config_from_file) with the same values;
#  b. files accelerate writes (write_basic_config, ClusterConfig.to_yaml_file
#     for MULTI_CPU and for DEEPSPEED) are read by ampkit: `ampkit launch
#     --config_file F /usr/bin/env` shows what it made of them in the
#     variables it gives rank 0 (WORLD_SIZE, AMPKIT_MIXED_PRECISION, ...).
# One line per check, "ok: ..." or "FAIL: ...".
#
# Usage: config_roundtrip.sh AMPKIT_CLI PYTHON WORKDIR
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
rm -f "$work"/ampkit_*.yaml "$work"/accelerate_*.yaml
failed=0

# --- a. ampkit writes, accelerate reads -------------------------------------

"$cli" config default --mixed_precision bf16 \
  --config_file "$work/ampkit_default.yaml" >/dev/null
# Compute environment, multi-CPU, 1 machine, no debug, 2 processes, no
# DeepSpeed, precision no, 1 accumulation step (tests/config/
# questionnaire_test.cpp gives the order of the questions).
printf '0\n1\n\n\n2\nno\n\n\n' |
  "$cli" config --config_file "$work/ampkit_multi_cpu.yaml" >/dev/null
# The same with DeepSpeed: ZeRO stage 2, no clipping, bf16, 2 steps.
printf '0\n1\n\n\n2\nyes\n2\nn\nbf16\n2\n' |
  "$cli" config --config_file "$work/ampkit_zero2.yaml" >/dev/null
# Multi-GPU with FSDP (accelerate asks it there): SHARD_GRAD_OP, units by
# type Block, BACKWARD_POST prefetch, sharded state dicts, forward
# prefetch, activation checkpointing, all GPUs, bf16, 1 step.
printf '0\nmulti-GPU\n\n\n2\nno\nyes\nSHARD_GRAD_OP\n0\nBlock\n1\nSHARDED_STATE_DICT\nyes\nyes\n\nbf16\n\n' |
  "$cli" config --config_file "$work/ampkit_fsdp.yaml" >/dev/null

# check_with_accelerate FILE KEY=VALUE...: accelerate's loader must accept
# FILE and give each KEY (an attribute, or deepspeed_config.NAME) VALUE.
# When it refuses FILE, the values are still checked on a copy without the
# keys it named, so that one refusal does not hide the rest.
check_with_accelerate() {
  "$python" - "$@" <<'EOF' || failed=1
import ast, os, re, sys, tempfile, yaml
from accelerate.commands.config.config_args import load_config_from_file

path, expected = sys.argv[1], sys.argv[2:]
name = os.path.basename(path)
bad = 0
try:
    config = load_config_from_file(path)
    print(f"ok: accelerate loads {name}")
except ValueError as e:
    print(f"FAIL: accelerate refuses {name}: {e}")
    bad = 1
    keys = ast.literal_eval(re.search(r"unknown keys \((\[.*?\])\)", str(e)).group(1))
    with open(path) as f:
        values = yaml.safe_load(f)
    for key in keys:
        values.pop(key)
    copy = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    yaml.safe_dump(values, copy)
    copy.close()
    config = load_config_from_file(copy.name)
    os.unlink(copy.name)
    name += f" (without {', '.join(keys)})"
for item in expected:
    key, want = item.split("=", 1)
    if key.startswith("deepspeed_config."):
        got = config.deepspeed_config.get(key.split(".", 1)[1])
    elif key.startswith("fsdp_config."):
        got = config.fsdp_config.get(key.split(".", 1)[1])
    else:
        got = getattr(config, key)
    got = str(getattr(got, "value", got))  # enums as their value
    if got == want:
        print(f"ok: accelerate reads {name}: {key} = {got}")
    else:
        print(f"FAIL: accelerate reads {name}: {key} = {got}, expected {want}")
        bad = 1
sys.exit(bad)
EOF
}

check_with_accelerate "$work/ampkit_default.yaml" \
  distributed_type=NO num_processes=1 mixed_precision=bf16 use_cpu=True
check_with_accelerate "$work/ampkit_multi_cpu.yaml" \
  distributed_type=MULTI_CPU num_processes=2 mixed_precision=no use_cpu=True
check_with_accelerate "$work/ampkit_zero2.yaml" \
  distributed_type=DEEPSPEED num_processes=2 mixed_precision=bf16 \
  deepspeed_config.zero_stage=2 deepspeed_config.gradient_accumulation_steps=2
check_with_accelerate "$work/ampkit_fsdp.yaml" \
  distributed_type=FSDP num_processes=2 mixed_precision=bf16 \
  fsdp_config.fsdp_sharding_strategy=SHARD_GRAD_OP \
  fsdp_config.fsdp_auto_wrap_policy=TRANSFORMER_BASED_WRAP \
  fsdp_config.fsdp_transformer_layer_cls_to_wrap=Block \
  fsdp_config.fsdp_activation_checkpointing=True \
  fsdp_config.fsdp_backward_prefetch=BACKWARD_POST \
  fsdp_config.fsdp_forward_prefetch=True \
  fsdp_config.fsdp_state_dict_type=SHARDED_STATE_DICT \
  fsdp_config.fsdp_offload_params=False

# --- b. accelerate writes, ampkit reads -------------------------------------

"$python" - "$work" <<'EOF'
import sys
from accelerate.commands.config.config_args import ClusterConfig
from accelerate.utils import write_basic_config

work = sys.argv[1]
# What `accelerate config default --mixed_precision bf16` writes (JSON text).
write_basic_config(mixed_precision="bf16", save_location=f"{work}/accelerate_basic.yaml")
common = dict(compute_environment="LOCAL_MACHINE", use_cpu=True, debug=False, num_processes=2)
ClusterConfig(distributed_type="MULTI_CPU", mixed_precision="no", **common).to_yaml_file(
    f"{work}/accelerate_multi_cpu.yaml")
ClusterConfig(
    distributed_type="DEEPSPEED", mixed_precision="bf16",
    deepspeed_config={
        "zero_stage": 2, "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
        "offload_optimizer_device": "none", "offload_param_device": "none",
        "zero3_init_flag": False},
    **common).to_yaml_file(f"{work}/accelerate_zero2.yaml")
# FSDP as accelerate's questionnaire writes it, with the choices ampkit
# builds (prefetch, full state dict, no offload).
ClusterConfig(
    distributed_type="FSDP", mixed_precision="bf16",
    fsdp_config={
        "fsdp_sharding_strategy": "SHARD_GRAD_OP", "fsdp_offload_params": False,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_transformer_layer_cls_to_wrap": "Block",
        "fsdp_backward_prefetch": "BACKWARD_PRE",
        "fsdp_state_dict_type": "FULL_STATE_DICT", "fsdp_forward_prefetch": True,
        "fsdp_use_orig_params": True, "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_sync_module_states": True, "fsdp_activation_checkpointing": True},
    **common).to_yaml_file(f"{work}/accelerate_fsdp.yaml")
EOF

# check_with_ampkit FILE VAR=VALUE...: `ampkit launch` with FILE must give
# rank 0 each VAR=VALUE.
check_with_ampkit() {
  local file=$1 out name
  name=$(basename "$file")
  shift
  if ! out=$("$cli" launch --quiet --config_file "$file" /usr/bin/env 2>&1); then
    echo "FAIL: ampkit launch refuses $name:"
    echo "$out" | tail -5
    failed=1
    return
  fi
  for want in "$@"; do
    if grep -qxF "[rank 0] $want" <<<"$out"; then
      echo "ok: ampkit reads $name: $want"
    else
      echo "FAIL: ampkit reads $name: no $want, got:" \
        "$(grep -oE "^\[rank 0\] ${want%%=*}=.*" <<<"$out" || echo none)"
      failed=1
    fi
  done
}

check_with_ampkit "$work/accelerate_basic.yaml" \
  WORLD_SIZE=1 AMPKIT_MIXED_PRECISION=bf16 AMPKIT_USE_CPU=1
check_with_ampkit "$work/accelerate_multi_cpu.yaml" \
  WORLD_SIZE=2 AMPKIT_MIXED_PRECISION=no AMPKIT_USE_CPU=1
check_with_ampkit "$work/accelerate_zero2.yaml" \
  WORLD_SIZE=2 AMPKIT_MIXED_PRECISION=bf16 AMPKIT_ZERO_STAGE=2 \
  AMPKIT_GRADIENT_ACCUMULATION_STEPS=4 AMPKIT_GRADIENT_CLIPPING=1
check_with_ampkit "$work/accelerate_fsdp.yaml" \
  WORLD_SIZE=2 AMPKIT_MIXED_PRECISION=bf16 ACCELERATE_USE_FSDP=true \
  FSDP_SHARDING_STRATEGY=SHARD_GRAD_OP FSDP_AUTO_WRAP_POLICY=TRANSFORMER_BASED_WRAP \
  FSDP_TRANSFORMER_CLS_TO_WRAP=Block FSDP_ACTIVATION_CHECKPOINTING=true \
  FSDP_BACKWARD_PREFETCH=BACKWARD_PRE FSDP_FORWARD_PREFETCH=true

exit "$failed"
