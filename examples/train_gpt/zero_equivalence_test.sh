#!/usr/bin/env bash
# End-to-end check of train_gpt under mpirun with 2 ranks (ZeRO, engine/zero_step.h):
#   1. stages 0, 1, 2 and 3 (and stage 3 with half the optimizer state on NVMe, stage 2 with it
#      on the device, stage 3 with the parameter shards on NVMe and half of them on the device,
#      and all on the device; stage 2 and 3 with the activation checkpoints in pinned memory and
#      on NVMe) print the same losses, norms and accuracies to the last digit (the stages
#      are bit-identical);
#   2. stage 3 with half the optimizer state on NVMe learns the addition task to the accuracy
#      goal, as the single-rank trainer does (scripts/demo's goal, 0.95, within 1500 steps).
#   3. a model over --gpu-memory-limit is refused at stage 0 and trains at stage 3.
#   4. stage 2 with --delayed-update still learns the task (to 0.6 within 1500 steps).
#   5. the validation loss on token data is sharded over the ranks (llm.c's validation): at 2
#      ranks of --batch 2 it equals the 1-rank figure of --batch 4 on the same weights (--lr 0),
#      at stages 0 and 3.
#   6. the micro-batch orders (micro, layer with the checkpoints on the device and on NVMe, the
#      planner's auto) print the same lines at stage 3, and --device-grad-sum at stage 2 those
#      of stage 0.
#   Also: each rank's placement line (any length) and --trace with every rank's steps.
# Usage: zero_equivalence_test.sh MPIEXEC TRAIN_GPT SCRATCH_DIR
set -euo pipefail
mpiexec=$1
train=$2
scratch=$3/train_gpt_zero
mkdir -p "$scratch"
root_flag=()
if [ "$(id -u)" = 0 ]; then root_flag=(--allow-run-as-root); fi
run2() { "$mpiexec" "${root_flag[@]}" --oversubscribe -np 2 "$train" --device cpu "$@"; }
common=(--steps 30 --eval-every 15 --target-accuracy 1.0 --layers 2 --channels 32 --batch 16)
# The step and eval lines without what depends on the machine (time, rate, MFU, memory).
strip() { grep -E '^(step|eval)' | sed -E 's/ \| [0-9.]+ ms \| .*//'; }
for stage in 0 1 2 3; do
  run2 "${common[@]}" --zero-stage "$stage" | strip >"$scratch/stage$stage.txt"
done
run2 "${common[@]}" --zero-stage 3 --offload-optimizer nvme --optimizer-nvme-fraction 0.5 \
  --nvme-path "$scratch" | strip >"$scratch/stage3-nvme.txt"
run2 "${common[@]}" --zero-stage 2 --offload-optimizer none | strip >"$scratch/stage2-device.txt"
run2 "${common[@]}" --zero-stage 3 --offload-param nvme --param-gpu-fraction 0.5 \
  --nvme-path "$scratch" | strip >"$scratch/stage3-param-nvme.txt"
run2 "${common[@]}" --zero-stage 3 --offload-param none | strip >"$scratch/stage3-param-device.txt"
run2 "${common[@]}" --zero-stage 2 --offload-activations cpu | strip >"$scratch/stage2-acts-cpu.txt"
run2 "${common[@]}" --zero-stage 3 --offload-activations nvme --checkpoint-interval 1 \
  --nvme-path "$scratch" | strip >"$scratch/stage3-acts-nvme.txt"
lines=$(wc -l <"$scratch/stage0.txt")
if [ "$lines" -lt 5 ]; then
  echo "train_gpt printed $lines step/eval lines at stage 0; expected at least 5" >&2
  exit 1
fi
# Placement (docs/training.md#where-each-rank-runs): rank 0 prints one line per rank, each rank
# bound to its own core where there are enough; unbound, the bits are the same.
run2 "${common[@]}" --zero-stage 3 --bind none >"$scratch/unbound.out"
strip <"$scratch/unbound.out" >"$scratch/stage3-unbound.txt"
run2 --steps 1 --layers 2 --channels 32 --batch 16 >"$scratch/placement.out"
if [ "$(nproc)" -ge 2 ]; then want="bound to its cores"; else want="not bound (more local ranks"; fi
for r in 0 1; do
  if ! grep -q "^placement rank $r: local $r/2, no GPU, cores \[.*$want" "$scratch/placement.out" ||
    ! grep -q "^placement rank $r: .*not bound (--bind none)" "$scratch/unbound.out"; then
    echo "train_gpt: rank $r's placement line is missing or wrong:" >&2
    grep "^placement" "$scratch/placement.out" "$scratch/unbound.out" >&2
    exit 1
  fi
done
# A long line (several long --nvme-path directories) reaches rank 0 whole, for each rank.
long=$scratch/$(printf 'd%.0s' $(seq 100))
dirs=
for i in 1 2 3 4 5 6; do
  mkdir -p "$long$i"
  dirs=$dirs${dirs:+,}$long$i
done
run2 --steps 1 --layers 2 --channels 32 --batch 16 --zero-stage 3 --offload-optimizer nvme \
  --nvme-path "$dirs" >"$scratch/long.out"
for r in 0 1; do
  if ! grep -q "^placement rank $r: .*drive ${long}1 on .*drive ${long}6 on NUMA node [a-z0-9]*$" \
    "$scratch/long.out"; then
    echo "train_gpt: rank $r's placement line with six drives is cut or missing:" >&2
    grep "^placement" "$scratch/long.out" >&2
    exit 1
  fi
done
# --trace under mpirun: one file, a process per rank, each with the traced steps' spans (rank 0
# alone wrote it before, with only its own steps).
run2 --steps 4 --trace-steps 2 --layers 2 --channels 32 --batch 16 --zero-stage 3 \
  --trace "$scratch/ranks-trace.json" >"$scratch/trace.out"
if ! python3 - "$scratch/ranks-trace.json" <<'PY'; then
import collections, json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
steps = collections.defaultdict(set)
for e in events:
    if e["ph"] == "X":
        steps[e["pid"]].add(e["args"]["step"])
assert names == {1: "rank 0", 2: "rank 1"}, names
assert steps[1] == steps[2] == {2, 3}, dict(steps)
PY
  echo "train_gpt: --trace under mpirun did not write both ranks' steps 2-3 (above)" >&2
  exit 1
fi
for other in stage1 stage2 stage3 stage3-nvme stage2-device stage3-param-nvme stage3-param-device \
  stage2-acts-cpu stage3-acts-nvme stage3-unbound; do
  if ! diff -u "$scratch/stage0.txt" "$scratch/$other.txt"; then
    echo "train_gpt: $other differs from stage 0 over 2 ranks (see the diff above)" >&2
    exit 1
  fi
done
echo "train_gpt: $lines step/eval lines identical at ZeRO stages 0-3 over 2 ranks"
# The model files written at stage 0 and at stage 3 (gathered from the shards) are the same.
for stage in 0 3; do
  run2 "${common[@]}" --zero-stage "$stage" --save-model "$scratch/model$stage.bin" \
    --export-safetensors "$scratch/model$stage.safetensors" >/dev/null
done
if ! cmp "$scratch/model0.bin" "$scratch/model3.bin" ||
  ! cmp "$scratch/model0.safetensors" "$scratch/model3.safetensors"; then
  echo "train_gpt: --save-model or --export-safetensors at stage 3 differs from stage 0" >&2
  exit 1
fi
echo "train_gpt: --save-model and --export-safetensors write the same files at stages 0 and 3"
run2 --batch 16 --zero-stage 3 --offload-optimizer nvme --optimizer-nvme-fraction 0.5 \
  --nvme-path "$scratch" --steps 1500 --target-accuracy 0.95 >"$scratch/learn.txt"
if ! grep -q "reached accuracy" "$scratch/learn.txt"; then
  tail -5 "$scratch/learn.txt" >&2
  echo "train_gpt: stage 3 over 2 ranks did not reach accuracy 0.95 in 1500 steps" >&2
  exit 1
fi
grep "reached accuracy" "$scratch/learn.txt"
# 3. A model whose blocks do not fit --gpu-memory-limit is refused at stage 0 before any step,
#    naming the flag, and trains at stage 3.
small=(--layers 16 --channels 64 --batch 4 --gpu-memory-limit 2MB --steps 3 --eval-every 3)
if run2 "${small[@]}" --zero-stage 0 >"$scratch/small0.txt" 2>&1; then
  echo "train_gpt: stage 0 trained a model over --gpu-memory-limit" >&2
  exit 1
fi
if ! grep -q "raise --gpu-memory-limit" "$scratch/small0.txt"; then
  cat "$scratch/small0.txt" >&2
  echo "train_gpt: the stage-0 refusal does not name --gpu-memory-limit" >&2
  exit 1
fi
run2 "${small[@]}" --zero-stage 3 >"$scratch/small3.txt"
grep -q "3 steps done" "$scratch/small3.txt"
echo "train_gpt: a model over the device cap is refused at stage 0 and trains at stage 3"
# 4. The delayed update (stage 2, warm-up 20) still learns: well above chance (0.1 per digit).
run2 --batch 16 --zero-stage 2 --delayed-update --delayed-update-warmup 20 --steps 1500 \
  --target-accuracy 0.6 >"$scratch/delayed.txt"
if ! grep -q "reached accuracy" "$scratch/delayed.txt"; then
  tail -3 "$scratch/delayed.txt" >&2
  echo "train_gpt: the delayed update did not reach accuracy 0.6 in 1500 steps" >&2
  exit 1
fi
grep "reached accuracy" "$scratch/delayed.txt"
# 5. Parameter flags that do not apply to the stage are refused, naming the flag and the reason.
if run2 "${common[@]}" --zero-stage 2 --offload-param cpu >"$scratch/param2.txt" 2>&1 ||
  ! grep -q -- "--offload-param cpu needs --zero-stage 3" "$scratch/param2.txt"; then
  cat "$scratch/param2.txt" >&2
  echo "train_gpt: --offload-param at stage 2 was not refused with its reason" >&2
  exit 1
fi
echo "train_gpt: --offload-param at stage 2 is refused: $(grep -m1 -- --offload-param "$scratch/param2.txt")"

# 5. Validation sharded over the ranks: the same global batches, the same figure.
python3 - "$scratch" <<'PY'
import random, struct, sys
random.seed(11)
for name, n in (("tok_train.bin", 6000), ("tok_val.bin", 3000)):
    t = [random.randrange(97) for _ in range(n)]
    h = [20240520, 1, len(t)] + [0] * 253
    with open(sys.argv[1] + "/" + name, "wb") as f:
        f.write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(t), *t))
PY
tok=(--data "$scratch/tok_train.bin" --val-data "$scratch/tok_val.bin" --vocab 128 --seq-len 16
     --layers 2 --channels 32 --steps 1 --val-every 1 --val-batches 6 --lr 0 --precision fp32)
for stage in 0 3; do
  "$train" --device cpu "${tok[@]}" --batch 4 --zero-stage "$stage" | grep '^val' >"$scratch/val1-$stage.txt"
  run2 "${tok[@]}" --batch 2 --zero-stage "$stage" | grep '^val' >"$scratch/val2-$stage.txt"
  if [ ! -s "$scratch/val1-$stage.txt" ] || ! diff "$scratch/val1-$stage.txt" "$scratch/val2-$stage.txt"; then
    echo "FAILED: stage $stage: the validation loss at 2 ranks differs from 1 rank's" >&2
    exit 1
  fi
done
echo "train_gpt: the validation loss at 2 ranks equals 1 rank's (stages 0 and 3): $(cat "$scratch/val1-0.txt")"

# 6. The order of the micro-batches (4 of them, a checkpoint every layer): at stage 3 the
#    segment-major order, the planner's choice (which prints both predictions) and the
#    micro-batch-major one print the same lines; with --device-grad-sum the lines of stage 0.
acc=(--steps 30 --eval-every 15 --target-accuracy 1.0 --layers 2 --channels 32 --batch 4
     --grad-accum 4 --checkpoint-interval 1)
for order in micro layer auto; do
  run2 "${acc[@]}" --zero-stage 3 --offload-param nvme --nvme-path "$scratch" \
    --microbatch-order "$order" >"$scratch/order-$order.log"
  strip <"$scratch/order-$order.log" >"$scratch/order-$order.txt"
done
run2 "${acc[@]}" --zero-stage 3 --offload-param nvme --nvme-path "$scratch" \
  --microbatch-order layer --offload-activations nvme | strip >"$scratch/order-layer-acts.txt"
run2 "${acc[@]}" --zero-stage 0 --microbatch-order micro | strip >"$scratch/order-stage0.txt"
run2 "${acc[@]}" --zero-stage 2 --microbatch-order layer --device-grad-sum |
  strip >"$scratch/order-sum.txt"
if [ "$(wc -l <"$scratch/order-micro.txt")" -lt 5 ] ||
  ! diff -u "$scratch/order-micro.txt" "$scratch/order-layer.txt" ||
  ! diff -u "$scratch/order-micro.txt" "$scratch/order-auto.txt" ||
  ! diff -u "$scratch/order-micro.txt" "$scratch/order-layer-acts.txt" ||
  ! diff -u "$scratch/order-stage0.txt" "$scratch/order-sum.txt"; then
  echo "train_gpt: the micro-batch orders differ (see the diff above)" >&2
  exit 1
fi
if ! grep -qE "^plan: micro-batch order (micro|layer) \(the planner's choice.*micro: predicted .* layer: predicted" \
  "$scratch/order-auto.log"; then
  grep "^plan" "$scratch/order-auto.log" >&2 || true
  echo "train_gpt: --microbatch-order auto did not say its choice and both predictions" >&2
  exit 1
fi
echo "train_gpt: micro-batch orders alike over 2 ranks; $(grep -m1 '^plan: micro-batch order' "$scratch/order-auto.log")"
