#!/usr/bin/env bash
# The PyTorch peer (gpt2_torch.py) works before a GPU sees it: on the CPU at a tiny size, from a
# model file train_gpt wrote and a token file, it trains 3 steps (its loss moves), and its loss at
# step 1 equals strata's fp32 loss on the same model file and batch (train_gpt --init-from,
# --data-order sequential) to 1e-5: two independent implementations of llm.c's GPT-2.
# Exit 77 (skipped) when no python3 has torch (scripts/setup installs Debian's python3-torch).
# Usage: torch_peer_test.sh TRAIN_GPT SCRATCH_DIR
set -euo pipefail
train=$1
s=$2/torch_peer
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$s"
mkdir -p "$s"
py=
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import torch' 2>/dev/null; then
    py=$p
    break
  fi
done
if [ -z "$py" ]; then
  echo "torch_peer: SKIPPED: no python3 with torch (apt-get install python3-torch)"
  exit 77
fi
python3 - "$s/tok.bin" <<'PY'
import random, struct, sys
random.seed(7)
n = 20000
t = [random.randrange(60) for _ in range(n)]
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)) +
                              struct.pack("<%dH" % n, *t))
PY
shape=(--device cpu --layers 2 --channels 32 --heads 4 --vocab 64)
run=(--batch 4 --seq-len 16 --precision fp32 --data "$s/tok.bin" --data-order sequential
  --target-accuracy 1.0 --val-every 100000 --steps 1)
"$train" "${shape[@]}" "${run[@]}" --save-model "$s/m.bin" >"$s/save.txt" 2>&1 ||
  { cat "$s/save.txt"; exit 1; }
"$train" --device cpu "${run[@]}" --init-from "$s/m.bin" --metrics "$s/strata.jsonl" \
  >"$s/strata.txt" 2>&1 || { cat "$s/strata.txt"; exit 1; }
"$py" "$here/gpt2_torch.py" --model "$s/m.bin" --data "$s/tok.bin" --batch 4 --seq 16 \
  --device cpu --quick --losses >"$s/torch.txt" 2>&1 || { cat "$s/torch.txt"; exit 1; }
"$py" - "$s/strata.jsonl" "$s/torch.txt" <<'PY'
import json, re, sys
strata = json.loads(open(sys.argv[1]).readline())["loss"]
lines = open(sys.argv[2]).read().splitlines()
peer = json.loads(lines[-1])
losses = [float(l.split()[-1]) for l in lines if re.match(r"step \d+ loss ", l)]
assert len(losses) == 3, lines
assert abs(peer["loss_step1"] - strata) <= 1e-5, (peer["loss_step1"], strata)
assert losses[2] != losses[0], losses
assert peer["tokens_per_s"] > 0 and peer["flops_per_token"] > 0, peer
print(f"torch_peer: step 1 loss {peer['loss_step1']:.7f}, strata's {strata:.7f}; "
      f"3 steps {losses}")
PY
