#!/usr/bin/env bash
# End-to-end check of train_gpt on llm.c token files (data.h):
#   1. a glob of two shards with --val-data trains: the validation loss falls well below its
#      first value, and --metrics holds one validation object per --val-every;
#   2. the learning rate of every step in --metrics follows the schedule's formula, computed
#      here (warm-up, then cosine to --lr-min);
#   3. --data-order shuffled gives other batches than sequential, and the same ones again for
#      the same --seed;
#   4. --grad-accum 2 of --batch 8 reads the same token windows as --batch 16 (llm.c's order)
#      and trains the same to fp32 rounding (serial and planned steps alike).
# Usage: token_data_test.sh TRAIN_GPT SCRATCH_DIR
set -euo pipefail
train=$1
scratch=$2/train_gpt_token_data
rm -rf "$scratch"
mkdir -p "$scratch"
# A learnable stream: runs of consecutive tokens (mod 97) from random starts.
python3 - "$scratch" <<'PY'
import random, struct, sys
random.seed(7)
def stream(n):
    t = []
    while len(t) < n:
        s = random.randrange(97)
        t += [(s + i) % 97 for i in range(random.randrange(5, 40))]
    return t[:n]
for name, n in (("train_000.bin", 12000), ("train_001.bin", 9000), ("val_000.bin", 4000)):
    t = stream(n)
    h = [20240520, 1, len(t)] + [0] * 253
    with open(sys.argv[1] + "/" + name, "wb") as f:
        f.write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(t), *t))
PY
common=(--device cpu --data "$scratch/train_*.bin" --vocab 128 --seq-len 32
        --layers 2 --channels 32)
"$train" "${common[@]}" --batch 8 --val-data "$scratch/val_*.bin" --val-every 20 --val-batches 10 \
  --steps 80 --lr 3e-3 --lr-schedule cosine --warmup 10 --lr-min 3e-4 \
  --metrics "$scratch/m.jsonl" >"$scratch/out.txt"
grep -q "data: 2 token file(s)" "$scratch/out.txt"
python3 - "$scratch/m.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "loss" in r]
vals = [r for r in rows if "val_loss" in r]
assert [r["step"] for r in vals] == [20, 40, 60, 80], vals
assert vals[-1]["val_loss"] < 0.6 * vals[0]["val_loss"], vals
assert len(steps) == 80
W, N, lr, lo = 10, 80, 3e-3, 3e-4
for r in steps:
    s = r["step"]
    # llm.c's alignment: its 0-based step s - 1 (the decay starts at the peak on step W + 1).
    want = lr * s / W if s <= W else lo + (lr - lo) * 0.5 * (1 + math.cos(math.pi * (s - 1 - W) / (N - W)))
    assert abs(r["lr"] - want) <= 1e-7 * lr, (s, r["lr"], want)
print("val loss %.3f -> %.3f; lr schedule as computed" % (vals[0]["val_loss"], vals[-1]["val_loss"]))
PY
for run in seq shuf1 shuf2; do
  order=sequential
  [ "$run" = seq ] || order=shuffled
  "$train" "${common[@]}" --batch 8 --steps 5 --data-order "$order" | grep '^step' |
    sed 's/ | [0-9.]* ms.*//' >"$scratch/$run.txt"
done
cmp -s "$scratch/shuf1.txt" "$scratch/shuf2.txt" || { echo "FAILED: shuffled runs differ" >&2; exit 1; }
if cmp -s "$scratch/seq.txt" "$scratch/shuf1.txt"; then
  echo "FAILED: shuffled and sequential orders gave the same losses" >&2
  exit 1
fi
for run in "accum2 --batch 8 --grad-accum 2" "big --batch 16" "accum2-serial --batch 8 --grad-accum 2 --schedule serial"; do
  name=${run%% *}
  # shellcheck disable=SC2086
  "$train" "${common[@]}" --precision fp32 --steps 6 --log-every 1 --metrics "$scratch/$name.jsonl" \
    ${run#* } >/dev/null
done
python3 - "$scratch" <<'PY'
import json, sys
def losses(name):
    return [r["loss"] for r in map(json.loads, open(sys.argv[1] + "/" + name + ".jsonl")) if "loss" in r]
a, b, s = losses("accum2"), losses("big"), losses("accum2-serial")
assert len(a) == len(b) == 6, (a, b)
for x, y in zip(a, b):
    assert abs(x - y) <= 1e-4 * abs(y), (a, b)
assert a == s, (a, s)
print("--grad-accum 2 x 8 rows: losses within 1e-4 of 16 rows, equal to the serial step's")
PY
echo "train_gpt: token data: shards, validation, schedule, orders and accumulation as expected"
