#!/usr/bin/env bash
# Every train_gpt command in the README and docs/*.md runs: the code-block lines that start with
# train_gpt, build/examples/train_gpt/train_gpt or mpirun (backslash continuations joined) are
# run from a scratch directory laid out as the docs assume (llm.c's token shards under
# dev/data/, gpt2_124M_bf16.bin, a Hugging Face Llama directory models/Llama-3.2-1B, out/,
# examples/ of this repository), with /mnt/nvme0 replaced by
# a scratch directory, shrunk to a one-layer model and two steps by flags appended (a flag given
# twice takes its last value; shape flags given beside --model win): --device cpu --steps 2
# --warmup 0 --batch 1 --seq-len 64 ... Each must exit 0. (scripts/demo and scripts/test, the
# other commands of the docs, are what CI and the demo run.)
# Usage: docs_commands_test.sh MPIEXEC TRAIN_GPT SCRATCH_DIR
set -euo pipefail
mpiexec=$1
train=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
scratch=$3/train_gpt_docs_commands
repo=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$scratch"
mkdir -p "$scratch/nvme" "$scratch/out" "$scratch/dev/data/tinyshakespeare" \
  "$scratch/dev/data/fineweb10B" "$scratch/dev/data/fineweb10B_llama3" "$scratch/models"
ln -s "$repo/examples" "$scratch/examples"
python3 - "$scratch/dev/data" <<'PY'
import random, struct, sys
random.seed(3)
for name in ("tinyshakespeare/tiny_shakespeare_train", "tinyshakespeare/tiny_shakespeare_val",
             "fineweb10B/fineweb_train_000001", "fineweb10B/fineweb_train_000002",
             "fineweb10B/fineweb_val_000000"):
    t = [random.randrange(50257) for _ in range(6000)]
    h = [20240520, 1, len(t)] + [0] * 253
    with open(sys.argv[1] + "/" + name + ".bin", "wb") as f:
        f.write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(t), *t))
# llm.c's Llama 3 shards: magic 20240801, version 7, uint32 tokens.
for name in ("fineweb_train_000001", "fineweb_train_000002", "fineweb_val_000000"):
    t = [random.randrange(128256) for _ in range(6000)]
    h = [20240801, 7, len(t)] + [0] * 253
    with open(sys.argv[1] + "/fineweb10B_llama3/" + name + ".bin", "wb") as f:
        f.write(struct.pack("<256i", *h) + struct.pack("<%dI" % len(t), *t))
PY
small=(--device cpu --steps 2 --val-every 2 --log-every 1 --warmup 0 --lr-decay-steps 0
       --batch 1 --grad-accum 1 --seq-len 64)
tiny_shape=(--layers 1 --channels 32 --heads 2)
# A GPT-2-shaped (V 50257, maxT 1024) one-layer bf16 model file named as llm.c's.
(cd "$scratch" && "$train" --model gpt2-124m "${tiny_shape[@]}" "${small[@]}" \
  --data dev/data/tinyshakespeare/tiny_shakespeare_train.bin --save-model gpt2_124M_bf16.bin \
  >/dev/null)
# A Hugging Face Llama directory (Llama 3.2 1B's vocabulary and context, one small layer).
(cd "$scratch" && "$train" --model llama-3.2-1b "${tiny_shape[@]}" --kv-heads 1 --intermediate 64 \
  "${small[@]}" --data dev/data/fineweb10B_llama3/fineweb_train_000001.bin \
  --save-model models/Llama-3.2-1B >/dev/null)
root_flag=""
if [ "$(id -u)" = 0 ]; then root_flag=--allow-run-as-root; fi
python3 - "$repo" >"$scratch/commands.txt" <<'PY'
import glob, re, sys
repo = sys.argv[1]
for path in [repo + "/README.md"] + sorted(glob.glob(repo + "/docs/*.md")):
    for block in re.findall(r"```[a-z]*\n(.*?)```", open(path).read(), re.S):
        for cmd in block.replace("\\\n", " ").split("\n"):
            cmd = " ".join(cmd.split())
            if re.match(r"^(train_gpt|build/examples/train_gpt/train_gpt|mpirun) ", cmd):
                print(path[len(repo) + 1:] + "\t" + cmd)
PY
count=0
while IFS=$'\t' read -r doc cmd; do
  run=${cmd//\/mnt\/nvme0/$scratch/nvme}
  run=$(echo "$run" | sed -E "s#(^| )(build/examples/train_gpt/)?train_gpt( |$)#\1$train\3#; s#^mpirun #$mpiexec $root_flag --oversubscribe #")
  extra=("${small[@]}")
  case " $cmd " in *" --model "*) extra+=("${tiny_shape[@]}") ;; esac
  echo "== $doc: $cmd"
  # shellcheck disable=SC2086
  if ! (cd "$scratch" && eval "$run" '"${extra[@]}"' </dev/null >"$scratch/run.log" 2>&1); then
    echo "FAILED ($doc): $cmd" >&2
    grep -v '^strata info' "$scratch/run.log" | tail -5 >&2
    exit 1
  fi
  count=$((count + 1))
done <"$scratch/commands.txt"
if [ "$count" -lt 8 ]; then
  echo "FAILED: only $count commands found in the docs" >&2
  exit 1
fi
echo "train_gpt: the $count train_gpt commands of the docs ran"
