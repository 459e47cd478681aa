#!/usr/bin/env bash
# CTest ampkit_report_renders_in_chromium: `ampkit report` on a synthetic run,
# then headless Chromium renders it to a PNG and must log no console errors.
#
#   bash report_browser_test.sh AMPKIT_EXECUTABLE WORK_DIR
#
# Exits 77 (CTest's skip) when no Chromium is installed. How console errors
# are caught: with --enable-logging=stderr --v=0 Chromium writes every message
# the page sends to its console, including uncaught exceptions, blocked loads
# (the report's Content-Security-Policy blocks anything from outside the
# file) and failed requests, as a log line "...:INFO:CONSOLE:<line>] "<message>",
# source: <url>" (older versions: "CONSOLE(<line>)"). The test fails on any
# such line. So that a change in Chromium's log format cannot make it pass
# silently, it first loads a control page with a console.error and an uncaught
# exception and requires both lines to appear.
set -euo pipefail

if [ "$#" -ne 2 ]; then
  echo "usage: $0 AMPKIT_EXECUTABLE WORK_DIR" >&2
  exit 2
fi
ampkit="$1"
work="$2"

browser=""
for candidate in chromium chromium-browser google-chrome-stable google-chrome; do
  if command -v "$candidate" >/dev/null 2>&1; then
    browser="$(command -v "$candidate")"
    break
  fi
done
if [ -z "$browser" ]; then
  echo "SKIP: no Chromium found (apt-get install chromium)"
  exit 77
fi
echo "browser: $browser ($("$browser" --version 2>/dev/null || echo unknown version))"

rm -rf "$work"
mkdir -p "$work/run"
run="$work/run"

# A run like the Accelerator logs: 60 steps, two skipped steps (the loss scale
# halves at each), one NaN loss (logged as null), GPU memory, one extra metric,
# and a configuration value that must come out escaped.
cat >"$run/config.json" <<'JSON'
{
  "mixed_precision": "fp16",
  "gradient_accumulation_steps": "2",
  "note": "<script>alert(1)</script> & \"quotes\""
}
JSON
awk 'BEGIN {
  scale = 65536; skipped = 0;
  for (step = 1; step <= 60; ++step) {
    if (step == 17 || step == 41) { scale /= 2; skipped += 1 }
    loss = (step == 30) ? "null" : sprintf("%.6f", 2.3 * exp(-step / 20) + 0.1);
    lr = (step <= 10) ? step * 1e-4 : 1e-3 * (60 - step) / 50;
    printf("{\"step\":%d,\"wall_time\":%.3f,\"loss\":%s,\"lr\":%.8g,", step, 1.7e9 + step, loss, lr);
    printf("\"loss_scale\":%g,\"skipped_steps\":%d,\"samples_per_second\":%.1f,", scale, skipped, 900 + 40 * sin(step));
    printf("\"memory_rss_mb\":%.1f,\"gpu_memory_mb\":%.1f,\"grad_norm\":%.4f}\n", 512 + step, 2048 + 3 * step, 1 / step);
  }
}' >"$run/metrics.jsonl"

"$ampkit" report "$run" --output "$work/report.html"
html="$work/report.html"

chrome() {
  timeout 120 "$browser" --headless=new --no-sandbox --disable-gpu \
    --disable-dev-shm-usage --no-first-run --user-data-dir="$work/profile" \
    --host-resolver-rules="MAP * ~NOTFOUND" \
    --enable-logging=stderr --v=0 "$@"
}
console_errors() {
  grep -E ':CONSOLE[:(]|Uncaught|Refused to|Failed to load resource' "$1" || true
}

# The control: the detector must see a deliberate error.
cat >"$work/control.html" <<'HTML'
<!DOCTYPE html><html><body><script>console.error('ampkit-control');</script>
<script>undefined_function_for_the_check();</script></body></html>
HTML
chrome --dump-dom "file://$work/control.html" >"$work/control.dom" 2>"$work/control.log" || true
if [ "$(console_errors "$work/control.log" | grep -c -E 'ampkit-control|Uncaught')" -lt 2 ]; then
  echo "FAIL: the control page's console.error and script error did not both" \
    "show in Chromium's log;" \
    "the console check cannot work with this Chromium. Log:" >&2
  cat "$work/control.log" >&2
  exit 1
fi

status=0
chrome --dump-dom "file://$html" >"$work/report.dom" 2>"$work/dom.log" || status=$?
if [ "$status" -ne 0 ]; then
  echo "FAIL: chromium --dump-dom exited $status" >&2
  cat "$work/dom.log" >&2
  exit 1
fi
chrome --screenshot="$work/report.png" --window-size=1200,2400 \
  --hide-scrollbars "file://$html" >/dev/null 2>"$work/screenshot.log" || status=$?
if [ "$status" -ne 0 ]; then
  echo "FAIL: chromium --screenshot exited $status" >&2
  cat "$work/screenshot.log" >&2
  exit 1
fi

errors="$(console_errors "$work/dom.log")$(console_errors "$work/screenshot.log")"
if [ -n "$errors" ]; then
  echo "FAIL: console errors while loading the report:" >&2
  echo "$errors" >&2
  exit 1
fi

# The browser built every chart (the DOM it parsed, not just the file).
for id in loss lr loss_scale samples_per_second memory grad_norm skipped_steps; do
  if ! grep -q "id=\"plot-$id\"" "$work/report.dom"; then
    echo "FAIL: no <svg id=\"plot-$id\"> in the rendered DOM" >&2
    exit 1
  fi
done
if grep -q '<script' "$work/report.dom"; then
  echo "FAIL: a <script> element reached the DOM (escaping failed)" >&2
  exit 1
fi

png="$work/report.png"
if [ ! -f "$png" ]; then
  echo "FAIL: no screenshot at $png" >&2
  cat "$work/screenshot.log" >&2
  exit 1
fi
size=$(stat -c %s "$png")
if [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then
  echo "FAIL: $png is not a PNG" >&2
  exit 1
fi
if [ "$size" -le 10240 ]; then
  echo "FAIL: $png is only $size bytes; expected a rendered page over 10 kB" >&2
  exit 1
fi
echo "PASS: $png ($size bytes), no console errors"
