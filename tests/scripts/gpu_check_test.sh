#!/usr/bin/env bash
# scripts/gpu-check on a machine without a GPU: it stops within seconds (before any install or
# build) with exit 2, saying so in $OUT/summary.log. Skipped where there is a GPU (there it runs
# the real check, minutes long).
# Usage: gpu_check_test.sh SOURCE_DIR SCRATCH_DIR
set -uo pipefail
src=$1
out=$2/gpu_check_test
if nvidia-smi -L >/dev/null 2>&1 || ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  echo "SKIPPED: this machine has a GPU (run scripts/gpu-check itself)"
  exit 0
fi
rm -rf "$out"
mkdir -p "$out"
t0=$(date +%s)
OUT=$out timeout 60 "$src/scripts/gpu-check" >"$out.txt" 2>&1
rc=$?
took=$(($(date +%s) - t0))
fail() { echo "FAILED: $*" >&2; cat "$out.txt" >&2; exit 1; }
[ "$rc" -eq 2 ] || fail "gpu-check without a GPU exited $rc, not 2"
[ "$took" -le 10 ] || fail "gpu-check without a GPU took ${took}s"
grep -q "no NVIDIA GPU on this machine" "$out/summary.log" || fail "summary.log: $(cat "$out/summary.log")"
grep -q "RESULT: NOT RUN (no GPU)" "$out/summary.log" || fail "summary.log: $(cat "$out/summary.log")"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); assert j["result"] == "NOT RUN (no GPU)", j' \
  "$out/summary.json" || fail "summary.json: $(cat "$out/summary.json")"
echo "gpu-check: without a GPU it stops in ${took}s with exit 2 and says why"
