#!/usr/bin/env bash
# Nothing a user owns is lost, round 2 (issue 47): each case a hostile pass found, at tiny sizes.
# Every refusal must come before step 1, in one line naming what it says, within a time limit
# (nothing waits on a pipe or reads without end), and leave every input as it was:
#   1. a Llama --save-model DIR writes or removes only files no input or other output is
#      (--config DIR/config.json, --data named like a shard in DIR, --metrics DIR/config.json);
#   2. sizes read from config.json are bounded before they size anything (under ulimit -v);
#   3. a Llama output that cannot be written (a file, a directory named model.safetensors in it,
#      a full file system) is refused before step 1;
#   4. NaN in safetensors weights, and F32 values beyond fp16's range under --precision fp16;
#   5. ranks whose settings differ are refused naming the setting and the ranks (no hang);
#   7. --resume of a token-data run without --data (override or not);
#   8. fp16 at a fixed loss scale whose every step overflows does not exit 0;
#   9. weights holding tensors their config.json does not name;
#  11. a config.json linked to /dev/zero, a --config over its bound, a 50 MB safetensors header
#      under ulimit -v;
#  12. --bind auto keeps to the affinity the process was given (taskset);
#  13. GPT-2 and llama-3 token shards in one glob;
#  14. FIFOs where files are read (config.json, model.safetensors, --data, --init-from), while
#      --config <(...) keeps working;
#  15. duplicate tensor names and duplicate DeepSpeed keys;
#  16. config.json fields of the wrong JSON type, rms_norm_eps 1e300;
#  17. the messages of a shard that is a directory, config.json a directory, --save-model
#      under a file, a config.json field's limit (named as the field), a resume past --steps;
#  18. under mpirun a refusal names its rank;
#  20. --checkpoint-dir and --nvme-path inside the --init-from directory;
#  21. flags that would be silently ignored;
#  22. sizes of 2^64 bytes and more;
#  23. many unknown DeepSpeed keys are refused fast, in a bounded number of lines.
# (10 and 19, the save's temporary file, are tests/core/test_input_output_files.cpp; 6, a file cut
# under the reader, tests/model/test_safetensors.cpp.)
# Usage: hostile_files_test.sh MPIEXEC TRAIN_GPT SCRATCH_DIR
set -uo pipefail
mpiexec=$1
train=$2
s=$3/train_gpt_hostile_files
rm -rf "$s"
mkdir -p "$s"
# Calibrations of these runs go to a cache of their own, not the user's.
export STRATA_CACHE_DIR=$s/cache
root_flag=()
if [ "$(id -u)" = 0 ]; then root_flag=(--allow-run-as-root); fi
# STRATA_TEST_KEEP_GOING=1 reports every failing case and goes on (to see which cases an older
# build fails), exiting 1 at the end.
failures=0
fail() {
  echo "FAILED: $*" >&2
  [ "${STRATA_TEST_KEEP_GOING:-0}" = 1 ] || exit 1
  failures=$((failures + 1))
}
trap 'kill $(jobs -p) 2>/dev/null || true; umount "$s/full" 2>/dev/null || true' EXIT

# refuse WANT1[|WANT2...] ARGS...: the run fails within 60 s, before step 1, with one line
# holding every WANT (separated by |).
refuse() {
  local want=$1
  shift
  local out=$s/out.txt
  timeout 60 "$train" "$@" >"$out" 2>&1
  local rc=$?
  [ "$rc" -ne 0 ] || { fail "accepted (exit 0): $*: $(tail -3 "$out")"; return; }
  [ "$rc" -ne 124 ] || { fail "still running after 60 s: $*"; return; }
  [ "$rc" -lt 128 ] || { fail "killed by a signal ($rc): $*: $(tail -3 "$out")"; return; }
  ! grep -q '^step' "$out" || { fail "trained before refusing: $*"; return; }
  local line
  line=$(grep -E '^train_gpt: ' "$out" | tail -1)
  local IFS='|'
  for w in $want; do
    case "$line" in
      *"$w"*) ;;
      *)
        fail "refusal of '$*' does not name '$w': $(cat "$out")"
        return
        ;;
    esac
  done
}
sums() { find "$@" -type f -print0 2>/dev/null | sort -z | xargs -0 md5sum; }

# A tiny Llama checkpoint directory, fp32 (so its F32 values can hold what fp16 cannot).
llama=(--device cpu --model llama-3.2-1b --layers 2 --channels 32 --heads 4 --kv-heads 2
  --intermediate 64 --vocab 16 --batch 8 --target-accuracy 1.0)
"$train" "${llama[@]}" --precision fp32 --steps 1 --save-model "$s/hf" >"$s/hf.txt" 2>&1 ||
  fail "the Llama checkpoint: $(cat "$s/hf.txt")"
hf_llama=(--device cpu --batch 8 --target-accuracy 1.0 --steps 1)
python3 - "$s" <<'PY'
import random, struct, sys
d = sys.argv[1]
random.seed(5)
def tokens(path, magic, version, fmt, n=4000, vocab=13):
    t = [random.randrange(vocab) for _ in range(n)]
    h = [magic, version, n] + [0] * 253
    open(path, "wb").write(struct.pack("<256i", *h) + struct.pack("<%d%s" % (n, fmt), *t))
tokens(d + "/gpt2_000.bin", 20240520, 1, "H")
tokens(d + "/gpt2_001.bin", 20240520, 1, "H")
tokens(d + "/mixed_000.bin", 20240520, 1, "H")
tokens(d + "/mixed_001.bin", 20240801, 7, "I")
PY

# 1. A Hugging Face output directory and the files in it.
mkdir -p "$s/run"
echo '{"gradient_clipping": 1.0}' >"$s/run/config.json"
cp "$s/gpt2_000.bin" "$s/run/model-00001-of-00002.safetensors"
echo '{"keep": 1}' >"$s/run/metrics.jsonl"
before=$(sums "$s/run")
refuse "--save-model|--config" "${llama[@]}" --steps 1 --config "$s/run/config.json" \
  --save-model "$s/run"
refuse "--save-model|--data" "${llama[@]}" --steps 1 \
  --data "$s/run/model-00001-of-00002.safetensors" --save-model "$s/run"
refuse "--metrics" "${llama[@]}" --steps 1 --metrics "$s/run/config.json" --save-model "$s/run"
refuse "--export-safetensors" "${llama[@]}" --steps 1 --metrics "$s/run/model.safetensors" \
  --export-safetensors "$s/run"
[ "$before" = "$(sums "$s/run")" ] || fail "1: a file in the output directory changed"
# A file of the directory the save does not write is not in its way.
"$train" "${llama[@]}" --steps 1 --metrics "$s/run/metrics.jsonl" --save-model "$s/run" \
  >"$s/out.txt" 2>&1 || fail "1: --metrics DIR/metrics.jsonl beside --save-model DIR: $(cat "$s/out.txt")"
cmp -s "$s/run/config.json" <(echo '{"gradient_clipping": 1.0}') &&
  fail "1: the save wrote no config.json"
echo "train_gpt: an output directory's files are compared with every input and output"

# 2. Sizes from config.json, bounded before they size anything (4 GiB of address space).
for layers in 100000000 1099511627776; do
  mkdir -p "$s/big$layers"
  sed -E "s/\"num_hidden_layers\": [0-9]+/\"num_hidden_layers\": $layers/" "$s/hf/config.json" \
    >"$s/big$layers/config.json"
  cp "$s/hf/model.safetensors" "$s/big$layers/"
  (failures=0; ulimit -v 4194304; refuse "num_hidden_layers|$layers" "${hf_llama[@]}" \
    --init-from "$s/big$layers"; [ "$failures" = 0 ]) || fail "2: under ulimit -v (above)"
done
# A checkpoint's stored shape (params.safetensors' metadata) is read only after its checksum.
"$train" "${llama[@]}" --steps 1 --checkpoint-dir "$s/ck2" --checkpoint-every 1 >"$s/out.txt" 2>&1 ||
  fail "2: the Llama checkpoint: $(cat "$s/out.txt")"
params=$(ls -d "$s"/ck2/step_*)/params.safetensors
python3 - "$params" <<'PY'
import sys
p = sys.argv[1]
b = open(p, "rb").read()
b = b.replace(b'num_hidden_layers\\": 2', b'num_hidden_layers\\": 9', 1)
open(p, "wb").write(b)
PY
(failures=0; ulimit -v 4194304; refuse "params.safetensors|the manifest says" "${llama[@]}" --steps 2 \
  --resume "$s/ck2"; [ "$failures" = 0 ]) || fail "2: the stored shape (above)"
echo "train_gpt: num_hidden_layers of 10^8 and 2^40 refused under ulimit -v; a checkpoint's" \
  "stored shape read only after its checksum"

# 3. Llama outputs that cannot be written, refused before step 1.
echo x >"$s/a_file"
refuse "--save-model|is a file" "${llama[@]}" --steps 1 --save-model "$s/a_file"
mkdir -p "$s/holder/model.safetensors"
refuse "--save-model|model.safetensors|not a file" "${llama[@]}" --steps 1 --save-model "$s/holder"
refuse "--save-model|not a directory" "${llama[@]}" --steps 1 --save-model "$s/a_file/sub"
mkdir -p "$s/full"
if mount -t tmpfs -o size=64k tmpfs "$s/full" 2>/dev/null; then
  mkdir -p "$s/full/out"
  # Full but for 16 KiB: a new file can be made there, the model's 38 KB cannot.
  dd if=/dev/zero of="$s/full/fill" bs=4k 2>/dev/null
  truncate -s -16K "$s/full/fill"
  refuse "--save-model|bytes" "${llama[@]}" --steps 1 --save-model "$s/full/out"
  umount "$s/full"
  echo "train_gpt: a Llama output on a full file system refused before step 1"
else
  echo "train_gpt: SKIPPED the full file system (cannot mount a tmpfs here)"
fi
echo "train_gpt: Llama outputs that cannot be written are refused before step 1"

# 4, 9, 15, 16. Bad checkpoints, each a copy of the good one changed.
python3 - "$s" <<'PY'
import json, os, shutil, struct, sys
d = sys.argv[1]
src = d + "/hf"
def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]
def save(path, header, data, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
def copy(name, edit=None, config=None):
    dst = d + "/" + name
    os.makedirs(dst, exist_ok=True)
    c = json.load(open(src + "/config.json"))
    if config: c.update(config)
    json.dump(c, open(dst + "/config.json", "w"))
    header, data = load(src + "/model.safetensors")
    if edit: data = edit(header, bytearray(data))
    save(dst + "/model.safetensors", header, bytes(data))
    return dst
def poke(name, value):
    def edit(header, data):
        t = header[name]
        struct.pack_into("<f", data, t["data_offsets"][0] + 4 * 5, value)
        return data
    return edit
copy("nan", poke("model.embed_tokens.weight", float("nan")))
copy("inf", poke("model.layers.1.mlp.up_proj.weight", float("inf")))
copy("huge", poke("model.layers.0.self_attn.q_proj.weight", 1.0e6))
copy("fewer", config={"num_hidden_layers": 1})
copy("typed_bias", config={"attention_bias": "true"})
copy("typed_mlp", config={"mlp_bias": 1})
copy("typed_dropout", config={"attention_dropout": "0.1"})
copy("eps", config={"rms_norm_eps": 1e300})
copy("vocab8", config={"vocab_size": 8})
# A name given twice: the header written by hand.
dup = copy("dup")
header, data = load(dup + "/model.safetensors")
text = json.dumps(header)
first = '"model.norm.weight": ' + json.dumps(header["model.norm.weight"])
text = text[:-1] + ", " + first + "}"
save(dup + "/model.safetensors", None, data, text.encode())
# A 50 MB header of small tensors (under ulimit -v below).
bomb = d + "/bomb"
os.makedirs(bomb, exist_ok=True)
shutil.copy(src + "/config.json", bomb + "/config.json")
entries = ",".join('"t%d":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}' % i
                   for i in range(900000))
save(bomb + "/model.safetensors", None, b"", ("{" + entries + "}").encode())
PY
refuse "model.embed_tokens.weight|nan" "${hf_llama[@]}" --init-from "$s/nan"
refuse "model.layers.1.mlp.up_proj.weight|inf" "${hf_llama[@]}" --init-from "$s/inf"
refuse "model.layers.0.self_attn.q_proj.weight|fp16" "${hf_llama[@]}" --init-from "$s/huge" \
  --precision fp16
"$train" "${hf_llama[@]}" --init-from "$s/huge" --precision bf16 >"$s/out.txt" 2>&1 ||
  fail "4: 1e6 under bf16 refused: $(cat "$s/out.txt")"
refuse "model.layers.1|does not name" "${hf_llama[@]}" --init-from "$s/fewer"
refuse "attention_bias|\"true\"" "${hf_llama[@]}" --init-from "$s/typed_bias"
refuse "mlp_bias" "${hf_llama[@]}" --init-from "$s/typed_mlp"
refuse "attention_dropout" "${hf_llama[@]}" --init-from "$s/typed_dropout"
refuse "rms_norm_eps|1e+300" "${hf_llama[@]}" --init-from "$s/eps"
# A config.json field's limit is reported as the field's, not as a flag's.
refuse "--init-from $s/vocab8: vocab_size 8 is smaller" "${hf_llama[@]}" --init-from "$s/vocab8"
refuse "model.norm.weight|named twice" "${hf_llama[@]}" --init-from "$s/dup"
# Parsed within 2 GiB of address space (the whole document took 3.8 GB), then refused for its
# tensors the config does not name.
(failures=0; ulimit -v 2097152; refuse "tensor t0|does not name" "${hf_llama[@]}" --init-from "$s/bomb"; \
  [ "$failures" = 0 ]) || fail "11: the 50 MB header under ulimit -v (above)"
echo "train_gpt: non-finite and out-of-range weights, extra tensors, mistyped fields, names" \
  "given twice and a 50 MB header are refused naming them"

# 11, 14, 15, 17, 23. Inputs that are not what they claim.
mkdir -p "$s/zero" "$s/fifo_cfg" "$s/fifo_st" "$s/dir_cfg/config.json" "$s/dir_shard"
ln -sf /dev/zero "$s/zero/config.json"
refuse "config.json|character device" "${hf_llama[@]}" --init-from "$s/zero"
mkfifo "$s/fifo_cfg/config.json"
refuse "config.json|pipe" "${hf_llama[@]}" --init-from "$s/fifo_cfg"
cp "$s/hf/config.json" "$s/fifo_st/"
mkfifo "$s/fifo_st/model.safetensors"
refuse "model.safetensors|regular file" "${hf_llama[@]}" --init-from "$s/fifo_st"
refuse "config.json|directory" "${hf_llama[@]}" --init-from "$s/dir_cfg"
cp "$s/hf/config.json" "$s/dir_shard/"
echo '{"weight_map": {"model.norm.weight": "model-00001-of-00001.safetensors"}}' \
  >"$s/dir_shard/model.safetensors.index.json"
mkdir -p "$s/dir_shard/model-00001-of-00001.safetensors"
refuse "model-00001-of-00001.safetensors|a directory" "${hf_llama[@]}" --init-from "$s/dir_shard"
mkfifo "$s/data.fifo" "$s/model.fifo"
refuse "data.fifo" "${llama[@]}" --steps 1 --data "$s/data.fifo"
refuse "model.fifo|regular file" --device cpu --steps 1 --init-from "$s/model.fifo"
"$train" "${llama[@]}" --steps 1 --config <(echo '{"gradient_clipping": 1.0}') \
  >"$s/out.txt" 2>&1 || fail "14: --config <(...) refused: $(cat "$s/out.txt")"
python3 -c "print('{\"x\": \"' + 'a' * (2 << 20) + '\"}')" >"$s/large.json"
refuse "--config|bytes" "${llama[@]}" --steps 1 --config "$s/large.json"
echo '{"gradient_clipping": 1.0, "gradient_clipping": 2.0}' >"$s/dup.json"
refuse "--config|gradient_clipping|twice" "${llama[@]}" --steps 1 --config "$s/dup.json"
python3 -c "
import json
print(json.dumps({'zero_optimization': {'k%d' % i: 1 for i in range(60000)}}))" >"$s/unknown.json"
start=$(date +%s)
refuse "60000 problems" "${llama[@]}" --steps 1 --config "$s/unknown.json"
[ $(($(date +%s) - start)) -le 20 ] || fail "23: 60000 unknown keys took over 20 s"
[ "$(wc -l <"$s/out.txt")" -le 30 ] || fail "23: $(wc -l <"$s/out.txt") lines for unknown keys"
echo "train_gpt: devices, pipes, directories, oversized and duplicated inputs refused at once"

# 7. --resume of a token-data run without its --data (with and without --resume-override).
tokrun=(--device cpu --layers 2 --channels 32 --batch 8 --vocab 64 --seq-len 32 --target-accuracy 1.0
  --val-every 100000)
"$train" "${tokrun[@]}" --data "$s/gpt2_000.bin" --steps 2 --checkpoint-dir "$s/ck7" \
  --checkpoint-every 2 >"$s/out.txt" 2>&1 || fail "7: the token-data run: $(cat "$s/out.txt")"
refuse "give --data $s/gpt2_000.bin" "${tokrun[@]}" --steps 3 --resume "$s/ck7"
refuse "give --data $s/gpt2_000.bin" "${tokrun[@]}" --steps 3 --resume "$s/ck7" --resume-override
# 17. A checkpoint of step 2 resumed to step 1 is refused, not "1 steps done".
refuse "--steps 1|step of the checkpoint" "${tokrun[@]}" --data "$s/gpt2_000.bin" --steps 1 \
  --resume "$s/ck7"
echo "train_gpt: a token-data checkpoint resumed without --data is refused, override or not"

# 13. Mixed token shards.
refuse "uint32|uint16" "${llama[@]}" --steps 1 --seq-len 8 --data "$s/mixed_*.bin"

# 20, 21, 22. Outputs inside the input, flags without effect, sizes past 2^64.
refuse "--checkpoint-dir|--init-from" "${hf_llama[@]}" --init-from "$s/hf" \
  --checkpoint-dir "$s/hf/ck" --checkpoint-every 1
mkdir "$s/hf/nvme"
refuse "--nvme-path|--init-from" "${hf_llama[@]}" --init-from "$s/hf" \
  --offload-optimizer nvme --nvme-path "$s/hf/nvme"
[ ! -e "$s/hf/ck" ] && [ -z "$(ls -A "$s/hf/nvme")" ] || fail "20: the input directory was written"
rmdir "$s/hf/nvme"
refuse "--layers|--init-from" "${hf_llama[@]}" --init-from "$s/hf" --layers 3
refuse "--microbatch-order|--grad-accum" "${llama[@]}" --steps 1 --microbatch-order layer
refuse "--resume-override|--resume" "${llama[@]}" --steps 1 --resume-override
refuse "--host-memory-limit|8EiB" "${llama[@]}" --steps 1 --host-memory-limit 20000000000000000000
refuse "--gpu-memory-limit|8EiB" "${llama[@]}" --steps 1 --gpu-memory-limit 16EiB
echo "train_gpt: outputs in the input, flags without effect and sizes past 8 EiB refused"

# 8. fp16 at a fixed loss scale whose every step overflows: no exit 0, no output.
timeout 120 "$train" --device cpu --layers 2 --channels 32 --batch 8 --precision fp16 \
  --loss-scale 1e30 --steps 2 --target-accuracy 1.0 --save-model "$s/never.bin" >"$s/out.txt" 2>&1 &&
  fail "8: every step skipped, exit 0: $(tail -3 "$s/out.txt")"
grep -q "^train_gpt: .*every step of this run (2) overflowed fp16" "$s/out.txt" ||
  fail "8: no line saying so: $(tail -3 "$s/out.txt")"
[ ! -e "$s/never.bin" ] || fail "8: the untrained model was saved"
echo "train_gpt: a run whose every step was skipped fails and writes nothing"

# 12. --bind auto starts from the affinity the process was given.
if command -v taskset >/dev/null && [ "$(nproc --all)" -ge 2 ]; then
  taskset -c 1 "$train" --device cpu --layers 2 --channels 32 --batch 8 --steps 1 \
    --target-accuracy 1.0 >"$s/bind.txt" 2>&1 || fail "12: $(cat "$s/bind.txt")"
  grep -qE 'cores \[1\]' "$s/bind.txt" || fail "12: taskset -c 1 widened: $(grep -i core "$s/bind.txt")"
  echo "train_gpt: --bind auto keeps to taskset's cores"
fi

# 5, 18. Ranks: settings that differ are refused naming them; a refusal names its rank.
runmpmd() {
  timeout 60 "$mpiexec" "${root_flag[@]}" --oversubscribe -np 1 "$train" "$@" "${rank0[@]}" : \
    -np 1 "$train" "$@" "${rank1[@]}"
}
tiny=(--device cpu --layers 2 --channels 32 --target-accuracy 1.0 --steps 2)
for pair in "--steps 2|--steps 3" "--grad-accum 1|--grad-accum 2" "--layers 2|--layers 3" \
  "--zero-stage 1|--zero-stage 2" "--precision bf16|--precision fp32" "--batch 4|--batch 8" \
  "--lr 0.001|--lr 0.002" "--seed 1|--seed 2" \
  "--data $s/gpt2_000.bin --vocab 64 --seq-len 8|--data $s/gpt2_001.bin --vocab 64 --seq-len 8"; do
  IFS='|' read -r a b <<<"$pair"
  read -ra rank0 <<<"$a"
  read -ra rank1 <<<"$b"
  runmpmd "${tiny[@]}" >"$s/mpmd.txt" 2>&1
  rc=$?
  [ "$rc" -ne 0 ] || fail "5: ranks with $a and $b trained: $(tail -3 "$s/mpmd.txt")"
  [ "$rc" -ne 124 ] || fail "5: ranks with $a and $b hung"
  ! grep -q '^step' "$s/mpmd.txt" || fail "5: ranks with $a and $b trained before refusing"
  grep -q -- "${a%% *} differs between the ranks: rank 0 has .*rank 1 has" "$s/mpmd.txt" ||
    fail "5: the refusal of $a / $b does not name the setting and the ranks: $(cat "$s/mpmd.txt")"
done
# One refused as the flags are parsed (before the communicator), one after.
for bad in "--zero-stage 9" "--precision fp8"; do
  read -ra flag <<<"$bad"
  "$mpiexec" "${root_flag[@]}" --oversubscribe -np 2 "$train" "${tiny[@]}" "${flag[@]}" \
    >"$s/ranks.txt" 2>&1 && fail "18: $bad accepted"
  grep -q "^train_gpt: rank 0: .*${flag[0]}" "$s/ranks.txt" &&
    grep -q "^train_gpt: rank 1: .*${flag[0]}" "$s/ranks.txt" ||
    fail "18: the refusal of $bad does not name its rank: $(cat "$s/ranks.txt")"
done
echo "train_gpt: ranks that disagree are refused naming the setting and the ranks"
[ "$failures" = 0 ] || { echo "FAILED: $failures cases" >&2; exit 1; }
echo "train_gpt: hostile inputs of round 2 refused, nothing of the user's lost"
