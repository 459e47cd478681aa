#!/usr/bin/env bash
# A full disk is called a full disk: `ampkit report` into a 4 KiB tmpfs
# says "the disk is full", not "check that the folder is writable".
# Skipped (77) where this user cannot mount a tmpfs.
# Usage: full_disk_test.sh AMPKIT
set -u
ampkit="$1"
dir="$(mktemp -d)"
trap 'umount "$dir/full" 2>/dev/null; rm -rf "$dir"' EXIT
mkdir -p "$dir/run" "$dir/full"
if ! mount -t tmpfs -o size=4k tmpfs "$dir/full" 2>/dev/null; then
  echo "full_disk_test: cannot mount a tmpfs here; skipped"
  exit 77
fi
printf '{"step":1,"loss":1.0}\n{"step":2,"loss":0.5}\n' > "$dir/run/metrics.jsonl"
out="$("$ampkit" report "$dir/run" --output "$dir/full/report.html" 2>&1)"
rc=$?
[ "$rc" -ne 0 ] || { echo "full_disk_test: FAIL: a report was written into a full disk: $out"; exit 1; }
grep -q "cannot write the report to $dir/full/report.html: the disk is full" <<<"$out" ||
  { echo "full_disk_test: FAIL: $out"; exit 1; }
[ ! -e "$dir/full/report.html.tmp" ] || { echo "full_disk_test: FAIL: left report.html.tmp"; exit 1; }
echo "full_disk_test: ok"
