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
  --eps 1e-8 --weight-decay 0.01 --weight-decay-on no-bias-norm --lr-schedule cosine --warmup 20 --lr-decay-steps 400 \
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

# 3. Configs shaped like the public ones (examples/ds_configs/shapes: Hugging Face's ZeRO-2/3
#    templates with "auto", a LLaMA-Factory-style offload config, fp16 with a cosine schedule,
#    DeepSpeed's aliases, a minimal one) run unedited at 1 and 2 ranks, and the settings in
#    effect are DeepSpeed's (and Hugging Face's for "auto").
shapes=$(cd "$(dirname "$0")/../ds_configs/shapes" && pwd)
small=(--steps 2 --val-every 2 --layers 2 --channels 32 --target-accuracy 1.0)
for np in 1 2; do
  for c in "$shapes"/*.json; do
    name=$(basename "$c" .json)
    if ! "$mpiexec" "${root_flag[@]}" --oversubscribe -np "$np" "$train" --device cpu \
      "${small[@]}" --config "$c" >"$scratch/$name-$np.txt" 2>&1; then
      echo "FAILED: $name at $np ranks did not run unedited:" >&2
      cat "$scratch/$name-$np.txt" >&2
      exit 1
    fi
  done
done
python3 - "$scratch" <<'PY'
import json, sys
d = sys.argv[1]
def run(name, np):
    text = open(f"{d}/{name}-{np}.txt").read()
    line = next(l for l in text.splitlines() if ", in effect: " in l)
    return json.loads(line.split(", in effect: ", 1)[1]), text
fails = []
def want(cond, what):
    if not cond: fails.append(what)
# Hugging Face's ZeRO-2 template: every "auto" as a default Trainer fills it.
e, t = run("hf_zero2_auto", 1)
want(e["train_micro_batch_size_per_gpu"] == 8 and e["gradient_accumulation_steps"] == 1, "hf2: batch 8 x 1")
want(not e["bf16"]["enabled"] and "fp16" not in e, "hf2: fp16/bf16 auto are off (fp32)")
want(abs(e["optimizer"]["params"]["lr"] - 5e-5) < 1e-12, "hf2: lr auto = 5e-5")
want(e["gradient_clipping"] == 1.0, "hf2: clipping auto = 1.0")
want(e["scheduler"]["params"]["warmup_num_steps"] == 0, "hf2: warm-up auto = 0")
want("fp16 (disabled" in t, "hf2: the disabled fp16 section is said to be ignored")
want(e["optimizer"]["weight_decay_on"] == "no-bias-norm", "hf2: Hugging Face's weight-decay rule")
want("zero_optimization.allgather_bucket_size" in t, "hf2: the ignored keys are listed")
# ZeRO-3 template: total_num_steps auto = the run's steps; parameters in host RAM.
e, t = run("hf_zero3_auto", 2)
want(e["scheduler"]["type"] == "WarmupDecayLR" and e["scheduler"]["params"]["total_num_steps"] == 2, "hf3: total_num_steps auto = --steps")
want(e["zero_optimization"]["offload_param"]["device"] == "cpu", "hf3: offload_param cpu")
# Minimal: train_batch_size over 2 ranks gives the micro-batch; no offload section: none;
# WarmupLR's own defaults (log warm-up of 1000 steps, peak 0.001); fp16 off: its loss_scale unread.
e, t = run("minimal_zero2", 2)
want(e["train_micro_batch_size_per_gpu"] == 8 and e["gradient_accumulation_steps"] == 1, "minimal: 16 = 8 x 1 x 2")
want(e["zero_optimization"]["offload_optimizer"]["device"] == "none", "minimal: offload none when absent")
p = e["scheduler"]["params"]
want(p["warmup_num_steps"] == 1000 and p["warmup_type"] == "log", "minimal: WarmupLR defaults")
want(abs(e["optimizer"]["params"]["lr"] - 1e-3) < 1e-12, "minimal: optimizer lr 1e-3")
want(e["gradient_clipping"] == 0.0, "minimal: no clipping when absent")
want(e["bf16"]["enabled"] and "fp16" not in e, "minimal: bf16, fp16 section ignored")
e, t = run("minimal_zero2", 1)
want(e["train_micro_batch_size_per_gpu"] == 16, "minimal: 16 = 16 x 1 x 1")
# fp16, cosine: accumulation inferred (32 = 8 x 2 x 2), cos_min_ratio's default 1e-4.
e, t = run("fp16_dynamic_cosine", 2)
want(e["gradient_accumulation_steps"] == 2, "fp16: accumulation 32 / (8 x 2) = 2")
want(e["fp16"]["enabled"] and e["fp16"]["initial_scale_power"] == 12, "fp16: loss scaling read")
want(abs(e["scheduler"]["params"]["cos_min_ratio"] - 1e-4) < 1e-9, "fp16: cos_min_ratio default 1e-4")
want(e["scheduler"]["params"]["warmup_type"] == "log", "fp16: log warm-up by default")
want("tensorboard" in t and "flops_profiler" in t, "fp16: monitor sections listed as ignored")
e, t = run("fp16_dynamic_cosine", 1)
want(e["gradient_accumulation_steps"] == 4, "fp16: accumulation 32 / (8 x 1) = 4")
# Aliases: bfloat16, cpu_offload, cpu_offload_param, the stage3_ spellings.
e, t = run("legacy_aliases", 2)
want(e["bf16"]["enabled"], "aliases: bfloat16 is bf16")
want(e["zero_optimization"]["offload_optimizer"]["device"] == "cpu", "aliases: cpu_offload")
want(e["zero_optimization"]["offload_param"]["device"] == "cpu", "aliases: cpu_offload_param")
want("bfloat16 read as bf16" in t, "aliases: said")
# DeepSpeed's CPU Adam variants: type Adam with adam_w_mode false (L2), no bias correction.
e, t = run("adam_l2_nobias", 2)
o = e["optimizer"]
want(o["type"] == "Adam" and not o["params"]["adam_w_mode"] and not o["params"]["bias_correction"], "adam: L2, no bias correction")
e, t = run("legacy_aliases", 1)
want(e["optimizer"]["params"]["adam_w_mode"] and "optimizer.params.adam_w_mode (type AdamW" in t, "aliases: AdamW stays decoupled")
e, t = run("factory_z3_offload_bf16", 2)
want(e["zero_optimization"]["stage"] == 3, "factory: stage 3")
for f in fails: print("FAILED:", f, file=sys.stderr)
sys.exit(1 if fails else 0)
PY
# train_batch_size alone, fewer than the ranks: refused naming the ranks (no division by zero).
echo '{"train_batch_size": 1}' >"$scratch/tbs1.json"
if run2 --steps 1 --config "$scratch/tbs1.json" >"$scratch/tbs1.txt" 2>&1; then
  echo "FAILED: train_batch_size 1 over 2 ranks ran" >&2
  exit 1
fi
grep -q "train_batch_size = 1 is not a multiple of the ranks (2)" "$scratch/tbs1.txt" || {
  cat "$scratch/tbs1.txt" >&2
  echo "FAILED: train_batch_size 1 over 2 ranks: want the ranks named" >&2
  exit 1
}
echo "train_gpt: $(ls "$shapes" | wc -l) real-world-shaped configs run unedited at 1 and 2 ranks with DeepSpeed's settings"
