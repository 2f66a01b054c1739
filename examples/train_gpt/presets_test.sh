#!/usr/bin/env bash
# --model presets: GPT-2 124M has llm.c's shape and parameter count (124475904, the padded
# vocabulary's rows included) and trains a step; shape flags given beside a preset win.
# Usage: presets_test.sh TRAIN_GPT SCRATCH_DIR
set -euo pipefail
train=$1
scratch=$2/train_gpt_presets
mkdir -p "$scratch"
"$train" --device cpu --model gpt2-124m --batch 1 --steps 1 --eval-every 1 \
  --gpu-memory-limit 2GiB >"$scratch/124m.txt"
grep -q "L=12 C=768 NH=12 V=50257(Vp=50304) maxT=1024 bf16, 124475904 params" "$scratch/124m.txt"
grep -q "^train_gpt: summary: 1 steps" "$scratch/124m.txt"
"$train" --device cpu --model gpt-7b --layers 1 --channels 64 --heads 4 --seq-len 16 --batch 2 \
  --steps 1 --eval-every 1 >"$scratch/small.txt"
grep -q "L=1 C=64 NH=4 V=50257(Vp=50304) maxT=16" "$scratch/small.txt"
echo "train_gpt: --model gpt2-124m is llm.c's 124475904 parameters; flags beside a preset win"
