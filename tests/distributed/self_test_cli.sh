#!/usr/bin/env bash
# `ampkit test` end to end. Usage: self_test_cli.sh AMPKIT TEST_HOOKS_LIB
set -euo pipefail
ampkit="$1" hooks="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export AMPKIT_CONFIG_FILE="$dir/none.yaml" AMPKIT_RDZV_DIR="$dir/rdzv"
fail() { echo "self_test_cli: $*" >&2; exit 1; }

# 1. On a working machine every supported precision matches one process.
out="$("$ampkit" test 2>&1)" || fail "ampkit test failed: $out"
grep -q "^  fp32: max |difference| .*: ok$" <<<"$out" || fail "no fp32 line: $out"
grep -Eq "^  bf16: (max \|difference\| .*: ok|skipped: .+)$" <<<"$out" || fail "no bf16 line: $out"
grep -q "^ampkit test: ok: 2 processes trained the same weights as one process in fp32" <<<"$out" ||
  fail "no success line: $out"

# 2. When the processes do not train the same model, the check says so (the
#    test suite's hook, LD_PRELOADed, skews rank 1's inputs).
set +e
out="$(LD_PRELOAD="$hooks" AMPKIT_SELF_TEST_INJECT=skew "$ampkit" test 2>&1)"
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "a broken run exited $rc, expected 1: $out"
grep -q "^  fp32: FAILED: the weights differ from one process's by up to" <<<"$out" || fail "no fp32 failure: $out"
grep -q "^ampkit test: FAILED in fp32" <<<"$out" || fail "no failure verdict: $out"

# 3. The config's num_processes is used; bad input is an error, not a run.
printf 'compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_processes: 3\nuse_cpu: true\n' > "$dir/three.yaml"
out="$("$ampkit" test --config_file "$dir/three.yaml" 2>&1)" || fail "3 processes: $out"
grep -q "^ampkit test: ok: 3 processes" <<<"$out" || fail "config's num_processes ignored: $out"
set +e
out="$("$ampkit" test --num-processes 1 2>&1)"; rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "at least 2 processes, got --num_processes 1" <<<"$out" || fail "--num_processes 1: $out"
echo "self_test_cli: ok"
