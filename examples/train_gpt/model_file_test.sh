#!/usr/bin/env bash
# End-to-end check of train_gpt's llm.c model files (model/model_file.h):
#   1. --save-model writes a model; --init-from it with --lr 0 for one step and --save-model
#      again gives the same bytes (bf16 and fp32): the values went in and came out unchanged;
#   2. a model trained 200 steps, saved and loaded, starts where it was: its first held-out
#      accuracy is the saved run's last;
#   3. --export-safetensors writes Hugging Face GPT-2's tensors (check_safetensors.py);
#   4. a truncated file and a missing one are refused in one line naming the file.
# Usage: model_file_test.sh TRAIN_GPT SCRATCH_DIR
set -euo pipefail
train=$1
scratch=$2/train_gpt_model_file
mkdir -p "$scratch"
common=(--device cpu --layers 2 --channels 32 --batch 16 --target-accuracy 1.0)
for precision in bf16 fp32; do
  a="$scratch/a-$precision.bin" b="$scratch/b-$precision.bin"
  "$train" "${common[@]}" --precision "$precision" --steps 30 --eval-every 30 \
    --save-model "$a" >/dev/null
  "$train" "${common[@]}" --precision "$precision" --steps 1 --eval-every 1 --lr 0 \
    --init-from "$a" --save-model "$b" >/dev/null
  if ! cmp "$a" "$b"; then
    echo "train_gpt: --init-from then --save-model changed the $precision model file" >&2
    exit 1
  fi
done
echo "train_gpt: --init-from then --save-model gives the same bytes (bf16, fp32)"
"$train" "${common[@]}" --steps 200 --eval-every 200 --save-model "$scratch/trained.bin" \
  >"$scratch/trained.txt"
"$train" "${common[@]}" --steps 1 --eval-every 1 --lr 0 --init-from "$scratch/trained.bin" \
  >"$scratch/resumed.txt"
saved=$(grep -oE 'accuracy [0-9.]+' "$scratch/trained.txt" | tail -1)
loaded=$(grep -oE 'accuracy [0-9.]+' "$scratch/resumed.txt" | tail -1)
if [ -z "$saved" ] || [ "$saved" != "$loaded" ]; then
  echo "train_gpt: the saved model's held-out $saved, loaded: $loaded" >&2
  exit 1
fi
echo "train_gpt: a saved model loads where it was (held-out $loaded)"
# 3. --export-safetensors: Hugging Face GPT-2's names and layouts, checked by a standard-library
#    Python reader against the llm.c model file of the same run (bf16 and fp32).
for precision in bf16 fp32; do
  "$train" "${common[@]}" --precision "$precision" --steps 20 --eval-every 20 \
    --save-model "$scratch/st-$precision.bin" \
    --export-safetensors "$scratch/st-$precision.safetensors" >/dev/null
  python3 "$(dirname "$0")/check_safetensors.py" "$scratch/st-$precision.bin" \
    "$scratch/st-$precision.safetensors"
done
head -c 5000 "$scratch/trained.bin" >"$scratch/truncated.bin"
for bad in "$scratch/truncated.bin" "$scratch/missing.bin"; do
  if "$train" "${common[@]}" --steps 1 --init-from "$bad" >"$scratch/bad.txt" 2>&1; then
    echo "train_gpt: --init-from $bad trained" >&2
    exit 1
  fi
  if [ "$(wc -l <"$scratch/bad.txt")" -ne 1 ] || ! grep -q "$bad" "$scratch/bad.txt"; then
    cat "$scratch/bad.txt" >&2
    echo "train_gpt: --init-from $bad: not one line naming the file" >&2
    exit 1
  fi
  echo "train_gpt: refused: $(cat "$scratch/bad.txt")"
done
