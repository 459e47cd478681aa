#!/usr/bin/env bash
# scripts/gpu_check/run.sh as a dry run (AMPKIT_GPU_CHECK_DRY_RUN=1: each
# check's command is written to its log instead of run): the orchestration
# itself works without a GPU, and results.json accounts for every check,
# each with its command, the GPT pairs in alternating order.
# Usage: gpu_check_dry_run.sh RUN_SH
set -uo pipefail
run_sh="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
AMPKIT_GPU_CHECK_DRY_RUN=1 AMPKIT_GPU_CHECK_RESULTS="$dir/results.json" \
  AMPKIT_GPU_CHECK_OUT="$dir/out" PYTHON=python3 bash "$run_sh" > "$dir/log" 2>&1
rc=$?
cat "$dir/log"
[ "$rc" -eq 0 ] || { echo "a dry run must exit 0, got $rc"; exit 1; }
python3 - "$dir/results.json" "$dir/out" <<'PY' || exit 1
import json, os, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "dry_run" and r["passed"] and not r["not_run"], r
names = list(r["checks"])
assert names[0] == "cpp_sees_gpu", names
modes = ("fp32_strict", "fp32_tf32", "fp16", "bf16")
assert len(names) == 12 + len(modes) * 3 * 2, len(names)
assert names[-1] == "gpt_fsdp_small_bf16", names
order = [l.split("\t")[0] for l in open(os.path.join(sys.argv[2], "checks.tsv"))]
for m in modes:
    first = [n for n in order if n.endswith("%s_1" % m)]
    second = [n for n in order if n.endswith("%s_2" % m)]
    assert first[0].startswith("gpt_ampkit") and second[0].startswith("gpt_python"), (first, second)
    tf32 = "on" if m == "fp32_tf32" else "off"
    for side in ("ampkit", "python"):
        log = open(os.path.join(sys.argv[2], "gpt_%s_%s_1.log" % (side, m))).read()
        assert "--tf32 %s" % tf32 in log, log
PY
echo "ok: the dry run accounts for every check"
