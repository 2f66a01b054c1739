#!/usr/bin/env bash
# train_gpt with a Llama (issue 30): a small Llama (grouped-query attention) learns the addition
# task and --save-model writes a Hugging Face checkpoint directory that an independent
# standard-library reader accepts (tests/model/check_hf_checkpoint.py); --init-from that
# directory with lr 0 writes the same weights back byte for byte; stage 3 with the parameters
# and the optimizer state on NVMe gives the losses of stage 0 bit for bit; bad inputs are one-line
# refusals naming the flag or the config.json field, and an input directory is never written;
# a checkpoint resumes bit for bit.
# Usage: llama_test.sh TRAIN_GPT SCRATCH_DIR
set -euo pipefail
train=$1
scratch=$2/train_gpt_llama
repo=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$scratch"
mkdir -p "$scratch/nvme"
small=(--device cpu --model llama-3.2-1b --layers 2 --channels 64 --heads 4 --kv-heads 2
  --intermediate 128 --vocab 16 --batch 16 --target-accuracy 1.0)
# 1. It learns, and its checkpoint is what Hugging Face's loader expects.
"$train" "${small[@]}" --steps 60 --eval-every 60 --save-model "$scratch/a" >"$scratch/a.txt"
first=$(grep -oE '^step +1/60 \| loss [0-9.]+' "$scratch/a.txt" | grep -oE '[0-9.]+$')
last=$(grep -oE '^step +60/60 \| loss [0-9.]+' "$scratch/a.txt" | grep -oE '[0-9.]+$')
if ! python3 -c "import sys; sys.exit(0 if float('$last') < float('$first') else 1)"; then
  echo "train_gpt: the Llama's loss went from $first to $last" >&2
  exit 1
fi
python3 "$repo/tests/model/check_hf_checkpoint.py" "$scratch/a"
# 2. Read back and written again unchanged.
"$train" --device cpu --init-from "$scratch/a" --batch 16 --steps 1 --eval-every 1 --lr 0 \
  --target-accuracy 1.0 --save-model "$scratch/b" >/dev/null
cmp "$scratch/a/model.safetensors" "$scratch/b/model.safetensors"
cmp "$scratch/a/config.json" "$scratch/b/config.json"
# 3. Stage 3, parameters and optimizer state on NVMe: the losses of stage 0.
common=(--device cpu --init-from "$scratch/a" --batch 16 --steps 8 --eval-every 8
  --target-accuracy 1.0)
"$train" "${common[@]}" | grep -E '^step' | sed -E 's/ \| [0-9.]+ ms.*//' >"$scratch/s0.txt"
"$train" "${common[@]}" --zero-stage 3 --offload-param nvme --offload-optimizer nvme \
  --optimizer-nvme-fraction 1 --nvme-path "$scratch/nvme" | grep -E '^step' | sed -E 's/ \| [0-9.]+ ms.*//' >"$scratch/s3.txt"
if ! diff "$scratch/s0.txt" "$scratch/s3.txt"; then
  echo "train_gpt: the Llama at stage 3 on NVMe differs from stage 0" >&2
  exit 1
fi
if [ "$(ls -A "$scratch/nvme")" ]; then
  echo "train_gpt: swap files left in $scratch/nvme" >&2
  exit 1
fi
# 4. A checkpoint (the parameters as one safetensors file with the config) resumes bit for bit.
"$train" "${common[@]}" --log-every 1 --checkpoint-every 4 --checkpoint-dir "$scratch/ckpt" |
  grep -E '^step +[5-8]/' | sed -E 's/ \| [0-9.]+ ms.*//' >"$scratch/whole.txt"
"$train" --device cpu --batch 16 --steps 8 --eval-every 8 --target-accuracy 1.0 --log-every 1 \
  --resume "$scratch/ckpt/step_00000004" | grep -E '^step' |
  sed -E 's/ \| [0-9.]+ ms.*//' >"$scratch/resumed.txt"
if ! diff "$scratch/whole.txt" "$scratch/resumed.txt"; then
  echo "train_gpt: the Llama resumed from step 4 differs" >&2
  exit 1
fi
# 5. Refusals: one line naming the flag or the field; the input directory is untouched.
before=$(md5sum "$scratch/a/model.safetensors")
refuse() {
  local want=$1
  shift
  if "$train" "$@" >"$scratch/bad.txt" 2>&1; then
    echo "train_gpt: accepted: $*" >&2
    exit 1
  fi
  if ! grep -q -- "$want" "$scratch/bad.txt"; then
    echo "train_gpt: refusal of '$*' does not name $want:" >&2
    cat "$scratch/bad.txt" >&2
    exit 1
  fi
}
refuse "--save-model" --device cpu --init-from "$scratch/a" --steps 1 --save-model "$scratch/a"
refuse "--export-safetensors" --device cpu --init-from "$scratch/a" --steps 1 \
  --export-safetensors "$scratch/a/inside"
refuse "--kv-heads" --device cpu --layers 2 --kv-heads 2 --steps 1
mkdir -p "$scratch/biased"
cp "$scratch/a/model.safetensors" "$scratch/biased/"
sed 's/"attention_bias": false/"attention_bias": true/' "$scratch/a/config.json" \
  >"$scratch/biased/config.json"
refuse "attention_bias" --device cpu --init-from "$scratch/biased" --steps 1
mkdir -p "$scratch/empty"
refuse "config.json" --device cpu --init-from "$scratch/empty" --steps 1
if [ "$before" != "$(md5sum "$scratch/a/model.safetensors")" ]; then
  echo "train_gpt: --init-from's directory changed" >&2
  exit 1
fi
echo "train_gpt: a Llama trains, saves, loads and runs at stage 3 on NVMe as at stage 0"
