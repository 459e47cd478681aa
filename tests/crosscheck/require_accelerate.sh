# Sourced by the cross-checks: `require_accelerate PYTHON` returns when
# PYTHON imports accelerate, else exits 77 (CTest's skip) or, with CI set,
# 1: in CI the real accelerate must check every landing (setup.sh test
# makes its venv), so its absence is a failure there.
require_accelerate() {
  if "$1" -c 'import accelerate' >/dev/null 2>&1; then
    return 0
  fi
  if [ -n "${CI:-}" ]; then
    echo "FAIL: $1 cannot import accelerate (CI is set; bash scripts/setup.sh test makes it)"
    exit 1
  fi
  echo "skip: $1 cannot import accelerate"
  exit 77
}
