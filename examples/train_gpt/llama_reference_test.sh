#!/usr/bin/env bash
# train_gpt against an independent float64 reference of Hugging Face's Llama (issue 30):
# tests/model/hf_llama_reference.py (numpy, no code shared with strata) writes a Hugging Face
# checkpoint directory and an llm.c token file, checks its own backward by finite differences,
# and trains 20 steps from them as train_gpt does; every step's loss of train_gpt in fp32 must
# agree to 1e-5 relative, for
#   untied head, grouped-query attention (4 query heads, 2 key/value heads), F32 weights in two
#   shards with their index, llama-3 token file (uint32);
#   tied head, multi-query attention (4 heads, 1 key/value head), BF16 weights in one file,
#   llama3 rope scaling, GPT-2 token file (uint16);
# each at stage 0 and at stage 3 with parameters and optimizer state on NVMe, at 1 rank and at
# 2 ranks under mpirun (the same global batch), with warm-up, cosine decay, weight decay off the
# norms and gradient clipping.
# Usage: llama_reference_test.sh MPIEXEC TRAIN_GPT SCRATCH_DIR
set -euo pipefail
mpiexec=$1
train=$2
scratch=$3/train_gpt_llama_reference
repo=$(cd "$(dirname "$0")/../.." && pwd)
reference=$repo/tests/model/hf_llama_reference.py
rm -rf "$scratch"
mkdir -p "$scratch/nvme"
python=
for p in python3 /usr/bin/python3; do
  if "$p" -c "import numpy" 2>/dev/null; then
    python=$p
    break
  fi
done
if [ -z "$python" ]; then
  echo "llama_reference_test: no python3 with numpy (scripts/setup installs python3-numpy)" >&2
  exit 1
fi
root_flag=()
if [ "$(id -u)" = 0 ]; then root_flag=(--allow-run-as-root); fi

"$python" "$reference" check-gradients

rows=8
seq=32
steps=20
optim=(--lr 2e-3 --lr-min 2e-4 --lr-schedule cosine --warmup 5 --weight-decay 0.1
  --weight-decay-on no-bias-norm --grad-clip 1.0)

cat >"$scratch/untied.json" <<'EOF'
{"vocab_size": 96, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false}
EOF
cat >"$scratch/tied.json" <<'EOF'
{"vocab_size": 80, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
 "num_attention_heads": 4, "num_key_value_heads": 1, "max_position_embeddings": 128,
 "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "tie_word_embeddings": true,
 "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}
EOF
"$python" "$reference" make "$scratch/untied" "$scratch/untied.bin" \
  --config-json "$scratch/untied.json" --dtype F32 --shards 2 --token-bytes 4 --seed 1
"$python" "$reference" make "$scratch/tied" "$scratch/tied.bin" \
  --config-json "$scratch/tied.json" --dtype BF16 --shards 1 --token-bytes 2 --seed 2

for case in untied tied; do
  for ranks in 1 2; do
    for where in stage0 stage3-nvme; do
      tier=()
      if [ "$where" = stage3-nvme ]; then
        tier=(--zero-stage 3 --offload-param nvme --offload-optimizer nvme
          --optimizer-nvme-fraction 1 --nvme-path "$scratch/nvme")
      fi
      launch=("$train")
      if [ "$ranks" = 2 ]; then
        launch=("$mpiexec" "${root_flag[@]}" --oversubscribe -np 2 "$train")
      fi
      metrics=$scratch/$case-$ranks-$where.jsonl
      "${launch[@]}" --device cpu --precision fp32 --init-from "$scratch/$case" \
        --data "$scratch/$case.bin" --batch $((rows / ranks)) --seq-len $seq --steps $steps \
        --log-every 1 --eval-every $steps --val-batches 1 "${optim[@]}" "${tier[@]}" \
        --metrics "$metrics" >"$scratch/$case-$ranks-$where.txt"
      echo "== $case, $ranks rank(s), $where"
      if ! "$python" "$reference" train "$scratch/$case" "$scratch/$case.bin" --rows $rows \
        --seq $seq --steps $steps "${optim[@]}" --metrics "$metrics" --rtol 1e-5 \
        >"$scratch/$case-$ranks-$where.ref.txt" 2>&1; then
        cat "$scratch/$case-$ranks-$where.ref.txt" >&2
        exit 1
      fi
      tail -n 1 "$scratch/$case-$ranks-$where.ref.txt"
      if [ "$(ls -A "$scratch/nvme")" ]; then
        echo "llama_reference_test: swap files left in $scratch/nvme" >&2
        exit 1
      fi
    done
  done
done
echo "llama_reference_test: train_gpt's Llama agrees with the float64 reference on every step"
