#!/usr/bin/env bash
# Bad flag values: each run must exit non-zero before training, print exactly one line starting
# "train_gpt:" that names the flag (the expected text below), and create no file.
# Usage: bad_flags_test.sh TRAIN_GPT SCRATCH_DIR
set -uo pipefail
train=$1
scratch=$2/train_gpt_bad_flags
rm -rf "$scratch"
mkdir -p "$scratch/nvme"
touch "$scratch/a-file"
head -c 2048 /dev/zero >"$scratch/zeros.bin"
# An llm.c token file of 1000 tokens, 0..99 repeated.
python3 -c '
import struct, sys
t = [i % 100 for i in range(1000)]
h = [20240520, 1, len(t)] + [0] * 253
open(sys.argv[1], "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(t), *t))
' "$scratch/tok.bin"
s=$scratch
# DeepSpeed configs with one bad key or value each: cfg NAME JSON
cfg() { echo "$2" >"$scratch/$1.json"; }
cfg typo '{"zero_optimization": {"offload_optimiser": {"device": "cpu"}}}'
cfg typo2 '{"optimizer": {"type": "AdamW", "params": {"weight_decy": 0.1}}}'
cfg live '{"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 1e9, "quantized_weights": true}}'
cfg stage_type '{"zero_optimization": {"stage": "three"}}'
cfg stage5 '{"zero_optimization": {"stage": 5}}'
cfg device '{"zero_optimization": {"offload_optimizer": {"device": "disk"}}}'
cfg ratio '{"zero_optimization": {"offload_optimizer": {"device": "cpu", "ratio": 1.5}}}'
cfg accum '{"gradient_accumulation_steps": 0}'
cfg pin '{"prescale_gradients": true}'
cfg sched '{"scheduler": {"type": "OneCycle"}}'
cfg both '{"fp16": {"enabled": true}, "bf16": {"enabled": true}}'
echo '{"zero_optimization": {' >"$scratch/broken.json"
cfg cosmin '{"scheduler": {"type": "WarmupLR", "params": {"cos_min_ratio": 0.1}}}'
cfg paths '{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/a"}, "offload_param": {"device": "nvme", "nvme_path": "/b"}}}'
cfg tbs '{"train_batch_size": 100, "train_micro_batch_size_per_gpu": 16}'
cfg lamb '{"optimizer": {"type": "Lamb"}}'
cfg notobj '{"zero_optimization": []}'
cfg subgroup '{"zero_optimization": {"sub_group_size": 10, "offload_optimizer": {"device": "cpu", "nvme_pth": "/x"}}}'
cfg auto '{"zero_optimization": {"stage": "auto"}}'
cfg tbs1 '{"train_batch_size": 3}'
cfg nopath '{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}}'
cfg tbs3 '{"train_batch_size": 100, "train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 2}'
# Five problems at once: all five named in one run.
cfg five '{"zero_optimization": {"stage": 7, "offload_optimiser": {}}, "optimizer": {"type": "SGD"}, "fp16": {"enabled": true, "hysteresis": 0}, "scheduler": {"type": "WarmupLR", "params": {"total_num_steps": 5}}}'
cfg block '{"aio": {"block_size": 1000}}'
cfg betas '{"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}}'
# args|expected text
cases=(
  "--layers 0|--layers: Value 0 not in range"
  "--channels 30 --heads 4|--heads 4 does not divide --channels 30"
  "--precision fp8|--precision 'fp8' is not accepted"
  "--loss-scale 100|--loss-scale 100 needs --precision fp16"
  "--precision fp16 --loss-scale -3|--loss-scale '-3' is not accepted"
  "--offload-optimizer disk|--offload-optimizer 'disk' is not accepted"
  "--offload-optimizer nvme|--offload-optimizer nvme needs --nvme-path"
  "--optimizer-nvme-fraction 0.5|--optimizer-nvme-fraction 0.5 needs --offload-optimizer nvme"
  "--optimizer-nvme-fraction 1.5|--optimizer-nvme-fraction: Value 1.5 not in range"
  "--gpu-optimizer-fraction 2|--gpu-optimizer-fraction: Value 2 not in range"
  "--offload-optimizer none --gpu-optimizer-fraction 0.5|needs --offload-optimizer cpu or nvme"
  "--zero-stage 4|--zero-stage: Value 4 not in range"
  "--zero-stage 2 --offload-param cpu|--offload-param cpu needs --zero-stage 3"
  "--zero-stage 3 --offload-param tape|--offload-param 'tape' is not accepted"
  "--zero-stage 3 --offload-param none --param-gpu-fraction 0.5|needs --offload-param cpu or nvme"
  "--param-gpu-fraction 0.5|--param-gpu-fraction needs --zero-stage 3"
  "--offload-activations cpu --checkpoint-interval 0|moves nothing with --checkpoint-interval 0"
  "--offload-activations cpu --layers 1|needs --layers 2 or more"
  "--offload-activations nvme|--offload-activations nvme needs --nvme-path"
  "--offload-activations ram|--offload-activations 'ram' is not accepted"
  "--schedule fast|--schedule 'fast' is not accepted"
  "--schedule serial --zero-stage 1|--zero-stage 1 needs --schedule planned"
  "--comm-backend nccl|--comm-backend 'nccl' is not accepted"
  "--comm fast|--comm 'fast' is not accepted"
  "--device cpu --comm nccl|--comm nccl needs a GPU"
  "--gpu-memory-limit lots|--gpu-memory-limit"
  "--host-memory-limit lots|--host-memory-limit"
  "--offload-optimizer nvme --nvme-path $s/missing|--nvme-path: '$s/missing' is not a directory"
  "--offload-optimizer nvme --nvme-path $s/a-file|--nvme-path: '$s/a-file' is not a directory"
  "--offload-optimizer nvme --nvme-path $s/nvme,|--nvme-path"
  "--init-from $s/missing.bin|$s/missing.bin: cannot open"
  "--init-from $s/zeros.bin|magic 0 is not llm.c's GPT-2 model magic"
  "--batch 0|--batch: Value 0 not in range"
  "--bind sockets|--bind: 'sockets' is not accepted"
  "--device cpu --device-ids 0|--device-ids: given with --device cpu"
  "--steps -1|--steps: Value -1 not in range"
  "--checkpoint-every 5|--checkpoint-every 5 needs --checkpoint-dir"
  "--checkpoint-dir $s/a-file --checkpoint-every 5|--checkpoint-dir $s/a-file is not a directory"
  "--resume $s/nvme|--resume $s/nvme: no complete checkpoint there"
  "--resume $s --init-from $s/zeros.bin|--resume and --init-from"
  "--digits 12|--digits: Value 12 not in range"
  "--prefetch-depth 99|--prefetch-depth: Value 99 not in range"
  "--delayed-update --schedule serial|--delayed-update needs --schedule planned"
  "--bucket-mb -1|--bucket-mb: Value -1 not in range"
  "--trace $s/t.json --schedule serial|--trace needs --schedule planned"
  "--val-every 0|--val-every: Value 0 not in range"
  "--target-accuracy 2|--target-accuracy: Value 2 not in range"
  "--host-memory-limit 64KiB --zero-stage 1|--host-memory-limit 0.1 MiB: pinned host memory needs"
  "--save-model $s/no-dir/m.bin|--save-model $s/no-dir/m.bin: the directory"
  "--metrics $s/no-dir/m.jsonl|--metrics $s/no-dir/m.jsonl: the directory"
  "--bogus-flag 1|--bogus-flag"
  "--host-memory-limit -5|--host-memory-limit: '-5' is not accepted (a size in bytes"
  "--gpu-memory-limit -5|--gpu-memory-limit: '-5' is not accepted (a size in bytes"
  "--checkpoint-dir $s/ck-none|--checkpoint-dir $s/ck-none saves nothing without --checkpoint-every N"
  "--model gpt-3|--model 'gpt-3' is not accepted"
  "--model gpt2-124m --heads 5|--heads 5 does not divide --channels 768"
  "--seq-len 5|--seq-len 5 is shorter than the data's sequences"
  "--vocab 10|--vocab 10 is smaller than the data's vocabulary"
  "--data-order random|--data-order 'random' is not accepted"
  "--lr-schedule step|--lr-schedule 'step' is not accepted"
  "--warmup-type exp|--warmup-type 'exp' is not accepted"
  "--warmup 2000 --lr-schedule cosine --lr-decay-steps 100|--warmup 2000 is longer than the decay's 100 steps"
  "--lr-min 0.1 --lr 0.01|--lr-min 0.1 is above --lr 0.01"
  "--beta2 1.5|--beta2: Value 1.5 not in range"
  "--peak-flops -1|--peak-flops: Value -1 not in range"
  "--data $s/nothing_*.bin|--data: '$s/nothing_*.bin': no file matches"
  "--data synthetic:multiply|--data 'synthetic:multiply' is not accepted"
  "--data synthetic:addition:12|the digits of synthetic:addition:DIGITS are 1..9"
  "--val-data $s/tok.bin|--val-data $s/tok.bin needs token --data"
  "--data $s/zeros.bin|$s/zeros.bin: bad magic 0"
  "--data $s/tok.bin --seq-len 16 --batch 2 --val-data $s/zeros.bin|--val-data: token file $s/zeros.bin: bad magic 0"
  "--data $s/tok.bin --seq-len 64 --batch 64|$s/tok.bin: 1000 tokens are fewer than one batch needs"
  "--config $s/typo.json|unknown key zero_optimization.offload_optimiser (did you mean zero_optimization.offload_optimizer?)"
  "--config $s/typo2.json|unknown key optimizer.params.weight_decy (did you mean optimizer.params.weight_decay?)"
  "--config $s/live.json|unknown key zero_optimization.quantized_weights: DeepSpeed refuses"
  "--config $s/stage_type.json|zero_optimization.stage = \"three\" is not accepted (an integer from 0 to 3)"
  "--config $s/stage5.json|zero_optimization.stage = 5 is not accepted"
  "--config $s/device.json|zero_optimization.offload_optimizer.device = \"disk\" is not accepted"
  "--config $s/ratio.json|zero_optimization.offload_optimizer.ratio = 1.5 is not accepted (a number from 0 to 1)"
  "--config $s/accum.json|gradient_accumulation_steps = 0 is not accepted (an integer from 1 to 1024)"
  "--grad-accum 2 --delayed-update|--grad-accum 2 does not go with --delayed-update"
  "--checkpoint-dir $s/ck --checkpoint-every 2 --delayed-update|--checkpoint-every 2 does not go with --delayed-update"
  "--grad-accum 0|--grad-accum: Value 0 not in range"
  "--config $s/pin.json|prescale_gradients = true is not accepted (only false"
  "--config $s/sched.json|scheduler.type = \"OneCycle\" is not accepted"
  "--config $s/both.json|fp16.enabled and bf16.enabled are both true"
  "--config $s/broken.json|--config $s/broken.json: not JSON"
  "--config $s/missing.json|--config $s/missing.json: cannot open"
  "--config $s/cosmin.json|scheduler.params.cos_min_ratio does not apply to scheduler type WarmupLR"
  "--config $s/paths.json|zero_optimization.offload_param.nvme_path = \"/b\" is not accepted (the same directory as zero_optimization.offload_optimizer.nvme_path"
  "--config $s/tbs.json|train_batch_size = 100 is not a multiple of train_micro_batch_size_per_gpu (16) x ranks (1)"
  "--config $s/tbs3.json|train_batch_size = 100 is not train_micro_batch_size_per_gpu (16) x gradient_accumulation_steps (2) x ranks (1) = 32"
  "--config $s/tbs1.json --batch 2|train_batch_size = 3 is not a multiple of train_micro_batch_size_per_gpu (2) x ranks (1)"
  "--config $s/nopath.json|zero_optimization.offload_optimizer.device (--offload-optimizer) nvme needs --nvme-path"
  "--config $s/auto.json|zero_optimization.stage = \"auto\" is not accepted (Hugging Face fills in"
  "--adam-mode sgd|--adam-mode 'sgd' is not accepted (use adamw or adam)"
  "--config $s/lamb.json|optimizer.type = \"Lamb\" is not accepted"
  "--config $s/notobj.json|zero_optimization = [] is not accepted (an object of keys)"
  "--config $s/subgroup.json|unknown key zero_optimization.offload_optimizer.nvme_pth (did you mean zero_optimization.offload_optimizer.nvme_path?)"
  "--config $s/block.json|aio.block_size = 1000 is not accepted"
  "--config $s/betas.json|optimizer.params.betas = [0.9] is not accepted (two numbers in [0, 1)"
  "--nvme-block-size 1000|--nvme-block-size 1000 is not accepted"
  "--data $s/tok.bin --vocab 50 --seq-len 32 --batch 2|$s/tok.bin: token 50 at index 50 is not below the vocabulary size 50"
)
before=$(find "$scratch" | sort)
failed=0
for c in "${cases[@]}"; do
  args=${c%%|*}
  want=${c#*|}
  # shellcheck disable=SC2086
  "$train" --device cpu $args >"$scratch/out.txt" 2>"$scratch/err.txt"
  rc=$?
  lines=$(grep -c '^train_gpt:' "$scratch/err.txt")
  if [ "$rc" -eq 0 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" "$scratch/err.txt" ||
    grep -q '^step' "$scratch/out.txt"; then
    echo "FAILED: train_gpt $args (exit $rc): want one line with: $want" >&2
    cat "$scratch/err.txt" >&2
    failed=1
  fi
  rm -f "$scratch/out.txt" "$scratch/err.txt"
done
# A config with five problems names all five in one run (one line each after the first).
"$train" --device cpu --config "$s/five.json" >"$scratch/out.txt" 2>"$scratch/err.txt" && failed=1
for want in "5 problems" "zero_optimization.stage = 7 is not accepted" \
  "unknown key zero_optimization.offload_optimiser" 'optimizer.type = "SGD" is not accepted' \
  "fp16.hysteresis = 0 is not accepted" \
  "scheduler.params.total_num_steps does not apply to scheduler type WarmupLR"; do
  if ! grep -qF -- "$want" "$scratch/err.txt"; then
    echo "FAILED: --config five.json: want: $want" >&2
    cat "$scratch/err.txt" >&2
    failed=1
  fi
done
if [ "$(grep -c '^train_gpt:' "$scratch/err.txt")" -ne 1 ] || [ "$(wc -l <"$scratch/err.txt")" -ne 6 ]; then
  echo "FAILED: --config five.json: want one train_gpt: line and five problem lines" >&2
  cat "$scratch/err.txt" >&2
  failed=1
fi
rm -f "$scratch/out.txt" "$scratch/err.txt"
after=$(find "$scratch" | sort)
if [ "$before" != "$after" ]; then
  echo "FAILED: the bad runs created files:" >&2
  diff <(echo "$before") <(echo "$after") >&2
  failed=1
fi
[ "$failed" -eq 0 ] || exit 1
echo "train_gpt: ${#cases[@]} bad flag values each refused in one line naming the flag, no file made"
