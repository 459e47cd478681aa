#!/usr/bin/env bash
# `ampkit config default|update`, `ampkit config` with piped answers and
# `ampkit env`, run as a user would. Usage: cli_test.sh AMPKIT SAMPLES_DIR
set -u
ampkit=$1
samples=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# default creates the file, with its parent directory.
"$ampkit" config default --config_file "$tmp/sub/a.yaml" --mixed-precision bf16 \
  > "$tmp/out" 2>&1 || fail "config default exited $?: $(cat "$tmp/out")"
grep -q "saved at $tmp/sub/a.yaml" "$tmp/out" || fail "no path printed: $(cat "$tmp/out")"
grep -q "^mixed_precision: bf16$" "$tmp/sub/a.yaml" || fail "a.yaml: $(cat "$tmp/sub/a.yaml")"
grep -q "^num_processes: 1$" "$tmp/sub/a.yaml" || fail "a.yaml: $(cat "$tmp/sub/a.yaml")"

# ... and never overwrites it.
cp "$tmp/sub/a.yaml" "$tmp/a.before"
"$ampkit" config default --config-file "$tmp/sub/a.yaml" --mixed_precision fp16 \
  > "$tmp/out" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "second config default exited $rc, expected 1"
grep -q "already exists" "$tmp/out" || fail "no refusal message: $(cat "$tmp/out")"
cmp -s "$tmp/sub/a.yaml" "$tmp/a.before" || fail "a.yaml changed"

# update keeps the keys ampkit does not act on and converts old names.
cp "$samples/legacy.yaml" "$tmp/old.yaml"
"$ampkit" config update --config_file "$tmp/old.yaml" > "$tmp/out" 2>&1 \
  || fail "config update exited $?: $(cat "$tmp/out")"
grep -q "^fsdp_config: {}$" "$tmp/old.yaml" || fail "passthrough lost: $(cat "$tmp/old.yaml")"
grep -q "^dynamo_config: {}$" "$tmp/old.yaml" || fail "dynamo_backend not converted"
grep -q "^mixed_precision: fp16$" "$tmp/old.yaml" || fail "fp16 not converted"
grep -q "^fp16:" "$tmp/old.yaml" && fail "old key fp16 kept"
cp "$samples/multi_cpu.yaml" "$tmp/cpu.yaml"
"$ampkit" config update --config_file "$tmp/cpu.yaml" > /dev/null 2>&1 \
  || fail "config update of multi_cpu.yaml failed"
grep -q "^mpirun_config: {}$" "$tmp/cpu.yaml" \
  || fail "mpirun_config lost: $(cat "$tmp/cpu.yaml")"

# A bad file is refused with its line; exit 1.
printf 'num_processes: 1\nnum_procesess: 2\n' > "$tmp/bad.yaml"
"$ampkit" config update --config_file "$tmp/bad.yaml" > "$tmp/out" 2>&1
[ $? -eq 1 ] || fail "config update of a bad file did not exit 1"
grep -q "^ampkit config: $tmp/bad.yaml:2: unknown key 'num_procesess'" "$tmp/out" \
  || fail "bad file message: $(cat "$tmp/out")"

# The questionnaire with piped (default) answers writes the file.
printf '\n\n\n\n\n\n\n\n' | "$ampkit" config --config_file "$tmp/b.yaml" \
  > "$tmp/out" 2>&1 || fail "config exited $?: $(tail -5 "$tmp/out")"
grep -q "saved at $tmp/b.yaml" "$tmp/out" || fail "config did not print the path"
grep -q "^distributed_type: 'NO'$" "$tmp/b.yaml" || fail "b.yaml: $(cat "$tmp/b.yaml" 2>&1)"

# env: a report naming LibTorch, the BLAS, threads and the config.
"$ampkit" env --config_file "$tmp/sub/a.yaml" > "$tmp/env" 2>&1 \
  || fail "env exited $?: $(cat "$tmp/env")"
for word in "LibTorch" "BLAS" "threads" "CPU" "memory" "config: $tmp/sub/a.yaml" \
  "  mixed_precision: bf16"; do
  grep -qF "$word" "$tmp/env" || fail "env lacks '$word': $(cat "$tmp/env")"
done
AMPKIT_CONFIG_FILE="$tmp/none.yaml" "$ampkit" env > "$tmp/env" 2>&1 \
  || fail "env without a config exited $?"
grep -qF "config: none" "$tmp/env" || fail "env without config: $(cat "$tmp/env")"

[ "$failures" -eq 0 ] && echo "all passed"
exit "$failures"
