#!/usr/bin/env bash
# End-to-end check of train_gpt: the same run with the optimizer state all in host RAM, all on
# NVMe, and with the serial (unplanned) step must print the same losses, norms and accuracies to
# the last digit (the offloaded and planned steps are bit-identical to the in-RAM serial one),
# and --trace must write a JSON trace. Usage: offload_equivalence_test.sh TRAIN_GPT SCRATCH_DIR
set -euo pipefail
train=$1
scratch=$2/train_gpt_equivalence
mkdir -p "$scratch"
common=(--device cpu --steps 30 --eval-every 15 --target-accuracy 1.0 --layers 2 --channels 32)
# Drop the timing columns (ms, tok/s) and the set-up lines that name sizes and paths.
# The step and eval lines without what depends on the machine (time, rate, MFU, memory).
strip() { grep -E '^(step|eval)' | sed -E 's/ \| [0-9.]+ ms \| .*//'; }
"$train" "${common[@]}" --offload-optimizer cpu | strip >"$scratch/ram.txt"
"$train" "${common[@]}" --offload-optimizer nvme --optimizer-nvme-fraction 1 \
  --nvme-path "$scratch" --trace "$scratch/trace.json" | strip >"$scratch/nvme.txt"
"$train" "${common[@]}" --offload-optimizer cpu --schedule serial | strip >"$scratch/serial.txt"
lines=$(wc -l <"$scratch/ram.txt")
if [ "$lines" -lt 5 ]; then
  echo "train_gpt printed $lines step/eval lines; expected at least 5" >&2
  exit 1
fi
if ! diff -u "$scratch/ram.txt" "$scratch/nvme.txt"; then
  echo "train_gpt: optimizer state on NVMe changed the run (see the diff above)" >&2
  exit 1
fi
if ! diff -u "$scratch/ram.txt" "$scratch/serial.txt"; then
  echo "train_gpt: the planned step differs from the serial one (see the diff above)" >&2
  exit 1
fi
if ! grep -q '"traceEvents"' "$scratch/trace.json"; then
  echo "train_gpt --trace wrote no trace events to $scratch/trace.json" >&2
  exit 1
fi
echo "train_gpt: $lines step/eval lines identical with the optimizer in RAM, on NVMe, and serial"
# --host-memory-limit: a plan over it is refused before training with the bytes and a fraction
# that fits; with that fraction the same run trains.
budget=(--device cpu --layers 12 --channels 128 --batch 8 --steps 3 --eval-every 3 --zero-stage 1
  --gpu-memory-limit 64MiB --host-memory-limit 30MiB)
if "$train" "${budget[@]}" >"$scratch/budget.txt" 2>&1; then
  echo "train_gpt: a plan over --host-memory-limit trained" >&2
  exit 1
fi
fraction=$(grep -oE -- '--optimizer-nvme-fraction [0-9.]+' "$scratch/budget.txt" | head -1 |
  cut -d' ' -f2)
if [ -z "$fraction" ] || grep -q '^step' "$scratch/budget.txt"; then
  cat "$scratch/budget.txt" >&2
  echo "train_gpt: the --host-memory-limit refusal gave no fraction, or came after a step" >&2
  exit 1
fi
"$train" "${budget[@]}" --offload-optimizer nvme --optimizer-nvme-fraction "$fraction" \
  --nvme-path "$scratch" >"$scratch/budget-fit.txt"
grep -q "3 steps done" "$scratch/budget-fit.txt"
echo "train_gpt: over --host-memory-limit: $(grep -oE 'needs [0-9.]+ MiB' "$scratch/budget.txt");" \
  "trains with --optimizer-nvme-fraction $fraction"
# --metrics: one JSON object per step and per evaluation, agreeing with the printed lines; and
# the final summary line.
"$train" "${common[@]}" --offload-optimizer cpu --metrics "$scratch/metrics.jsonl" \
  >"$scratch/metrics-run.txt"
grep -q "^train_gpt: summary: 30 steps, " "$scratch/metrics-run.txt"
python3 - "$scratch/metrics.jsonl" "$scratch/metrics-run.txt" <<'PY'
import json, re, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
steps = [r for r in rows if "loss" in r]
evals = [r for r in rows if "val_loss" in r]
assert [r["step"] for r in steps] == list(range(1, 31)), "step objects: %s" % [r["step"] for r in steps]
for r in steps:
    assert set(r) >= {"step", "loss", "norm", "lr", "ms", "tokens_per_s"}, r
printed = {int(m.group(1)): float(m.group(2)) for m in
           re.finditer(r"^step +(\d+) \| loss ([0-9.]+)", open(sys.argv[2]).read(), re.M)}
for r in steps:
    if r["step"] in printed:
        assert abs(r["loss"] - printed[r["step"]]) < 6e-5, (r, printed[r["step"]])
assert [r["step"] for r in evals] == [15, 30], evals
vals = {int(m.group(1)): float(m.group(2)) for m in
        re.finditer(r"^eval +(\d+) .*val loss ([0-9.]+)", open(sys.argv[2]).read(), re.M)}
for r in evals:
    assert abs(r["val_loss"] - vals[r["step"]]) < 6e-5, (r, vals)
print("train_gpt: --metrics has %d step and %d evaluation objects matching the log" %
      (len(steps), len(evals)))
PY
