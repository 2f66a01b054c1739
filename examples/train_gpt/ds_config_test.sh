#!/usr/bin/env bash
# train_gpt --config (ds_config.h), over 2 ranks under mpirun:
#   1. each example DeepSpeed config of examples/ds_configs and the flags it stands for give the
#      same step and eval lines to the last digit over 30 steps (the ZeRO-3 one with its
#      nvme_path pointed at the scratch directory);
#   2. a flag given beside the file wins, and the effective config printed says so.
# Usage: ds_config_test.sh MPIEXEC TRAIN_GPT SCRATCH_DIR
set -euo pipefail
mpiexec=$1
train=$2
scratch=$3/train_gpt_ds_config
configs=$(cd "$(dirname "$0")/../ds_configs" && pwd)
rm -rf "$scratch"
mkdir -p "$scratch/nvme"
root_flag=()
if [ "$(id -u)" = 0 ]; then root_flag=(--allow-run-as-root); fi
run2() { "$mpiexec" "${root_flag[@]}" --oversubscribe -np 2 "$train" --device cpu "$@"; }
strip() { grep -E '^(step|eval)' | sed -E 's/ \| [0-9.]+ ms \| .*//'; }
common=(--steps 30 --val-every 15 --log-every 1 --target-accuracy 1.0 --layers 4 --channels 32)

# 1. ZeRO-2, optimizer in host RAM, cosine schedule.
run2 "${common[@]}" --config "$configs/zero2_cpu_offload.json" | strip >"$scratch/z2-config.txt"
run2 "${common[@]}" --batch 16 --grad-clip 1.0 --precision bf16 --zero-stage 2 \
  --bucket-mb 0.95367431640625 --offload-optimizer cpu --lr 3e-3 --beta1 0.9 --beta2 0.95 \
  --eps 1e-8 --weight-decay 0.01 --lr-schedule cosine --warmup 20 --lr-decay-steps 400 \
  --lr-min 3e-4 --warmup-type linear | strip >"$scratch/z2-flags.txt"
# ZeRO-3, parameters and optimizer state on NVMe, activation checkpoints in host RAM.
sed "s#\"/tmp\"#\"$scratch/nvme\"#g" "$configs/zero3_nvme_offload.json" >"$scratch/z3.json"
run2 "${common[@]}" --config "$scratch/z3.json" | strip >"$scratch/z3-config.txt"
run2 "${common[@]}" --batch 8 --grad-clip 1.0 --precision bf16 --zero-stage 3 \
  --param-persistence-threshold 0 --offload-optimizer nvme --optimizer-nvme-fraction 1 \
  --nvme-path "$scratch/nvme" --nvme-buffer-count 4 --offload-param nvme --prefetch-depth 2 \
  --offload-activations cpu --checkpoint-interval 2 --lr 3e-3 --weight-decay 0 \
  --lr-schedule constant --warmup 10 --warmup-type log --nvme-block-size 1MiB \
  --nvme-queue-depth 32 | strip >"$scratch/z3-flags.txt"
for z in z2 z3; do
  lines=$(wc -l <"$scratch/$z-flags.txt")
  if [ "$lines" -lt 32 ]; then
    echo "FAILED: $z printed $lines step/eval lines, expected 32" >&2
    exit 1
  fi
  if ! diff -u "$scratch/$z-flags.txt" "$scratch/$z-config.txt"; then
    echo "FAILED: $z: the config and its flags differ (see the diff above)" >&2
    exit 1
  fi
done
echo "train_gpt: both example configs give their flags' runs exactly (30 steps, 2 ranks)"

# 2. A flag beside the file wins.
run2 --steps 1 --lr 1e-3 --config "$configs/zero2_cpu_offload.json" >"$scratch/beside.txt"
grep -q '"lr":0.001' "$scratch/beside.txt" || { echo "FAILED: --lr beside --config" >&2; exit 1; }
grep -q '"stage":2' "$scratch/beside.txt"
echo "train_gpt: a flag beside --config wins"
