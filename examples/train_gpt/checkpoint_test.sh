#!/usr/bin/env bash
# Checkpoints and resume (engine/checkpoint.h), ZeRO stage 3 with half of the optimizer state on
# NVMe, over 1 and 2 ranks:
#   1. 20 straight steps print the same lines as 10 steps, a checkpoint, and a resumed run to 20
#      (fp16 with its loss scaler at 1 rank; shuffled token data at 2 ranks, whose position is
#      restored);
#   2. a process killed (SIGKILL) at 12 points spread over a checkpoint's write always leaves a
#      loadable checkpoint, and the run resumed from it prints the uninterrupted run's lines;
#   3. a byte flipped in any file of a checkpoint, a truncated file, a missing DONE marker,
#      another rank count, stage or model are refused naming the file or both values;
#   4. --keep-checkpoints keeps the newest complete ones; --steps 0 exports a checkpoint;
#   5. a save onto a full disk (a small tmpfs; skipped where one cannot be mounted) stops the run
#      and leaves the previous checkpoint complete.
# Usage: checkpoint_test.sh MPIEXEC TRAIN_GPT SCRATCH_DIR
set -euo pipefail
mpiexec=$1
train=$2
scratch=$3/train_gpt_checkpoint
rm -rf "$scratch"
mkdir -p "$scratch/nvme"
root_flag=()
if [ "$(id -u)" = 0 ]; then root_flag=(--allow-run-as-root); fi
runn() { local n=$1; shift; "$mpiexec" "${root_flag[@]}" --oversubscribe -np "$n" "$train" "$@"; }
# The step lines without the step count (runs to different --steps) and the machine's figures.
strip() { grep -E '^step' | sed -E 's#^(step +[0-9]+)/[0-9]+#\1#; s/ \| [0-9.]+ ms \| .*//'; }
python3 - "$scratch/tokens.bin" <<'PY'
import random, struct, sys
random.seed(5)
t = [random.randrange(13) for _ in range(3000)]
h = [20240520, 1, len(t)] + [0] * 253
open(sys.argv[1], "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(t), *t))
PY
common=(--device cpu --layers 3 --channels 32 --batch 8 --zero-stage 3 --offload-optimizer nvme
        --optimizer-nvme-fraction 0.5 --nvme-path "$scratch/nvme" --val-every 1000 --log-every 1
        --target-accuracy 1.0)
fail() { echo "FAILED: $*" >&2; exit 1; }

# 1. Resume equality.
for n in 1 2; do
  if [ "$n" = 1 ]; then
    extra=(--precision fp16 --initial-scale-power 20)
  else
    extra=(--data "$scratch/tokens.bin" --vocab 13 --seq-len 16 --data-order shuffled)
  fi
  ck="$scratch/ck$n"
  runn "$n" "${common[@]}" "${extra[@]}" --steps 20 | strip >"$scratch/straight$n.txt"
  runn "$n" "${common[@]}" "${extra[@]}" --steps 10 --checkpoint-dir "$ck" --checkpoint-every 5 \
    | strip >"$scratch/first$n.txt"
  runn "$n" "${common[@]}" "${extra[@]}" --steps 20 --resume "$ck" | strip >"$scratch/rest$n.txt"
  cat "$scratch/first$n.txt" "$scratch/rest$n.txt" >"$scratch/resumed$n.txt"
  [ "$(wc -l <"$scratch/straight$n.txt")" -eq 20 ] || fail "$n ranks: 20 step lines expected"
  diff -u "$scratch/straight$n.txt" "$scratch/resumed$n.txt" ||
    fail "$n ranks: 10 steps + resume + 10 differ from 20 straight steps"
done
echo "train_gpt: 10 steps + resume + 10 = 20 straight steps, bit for bit (1 rank fp16, 2 ranks token data)"

# 2. SIGKILL during a save: resume from what is left, compare with the straight run.
base="$scratch/ck1"  # complete checkpoints of steps 5 and 10 (1 rank, fp16)
extra=(--precision fp16 --initial-scale-power 20)
killed=0
for k in 1 2 3 4 6 8 10 13 16 20 25 30; do
  ck="$scratch/kill$k"
  rm -rf "$ck"
  cp -r "$base" "$ck"
  rc=0
  (STRATA_TEST_CHECKPOINT_KILL=$k "$train" "${common[@]}" "${extra[@]}" --steps 14 --resume "$ck" \
    --checkpoint-dir "$ck" --checkpoint-every 2 --keep-checkpoints 1 >/dev/null 2>&1
    exit $?) 2>/dev/null ||
    rc=$?
  [ "$rc" -eq 137 ] && killed=$((killed + 1))
  # The resumed run owns the directory (--checkpoint-dir; no save before step 20): it removes
  # what the killed save left.
  "$train" "${common[@]}" "${extra[@]}" --steps 20 --resume "$ck" --checkpoint-dir "$ck" \
    --checkpoint-every 100 2>"$scratch/err.txt" |
    strip >"$scratch/after$k.txt" || fail "kill point $k: no loadable checkpoint: $(cat "$scratch/err.txt")"
  leftover=$(find "$ck" -name '*.tmp*')
  [ -z "$leftover" ] || fail "kill point $k: the next run left $leftover"
  lines=$(wc -l <"$scratch/after$k.txt")
  diff -u <(tail -n "$lines" "$scratch/straight1.txt") "$scratch/after$k.txt" ||
    fail "kill point $k: the resumed run differs from the straight one"
done
[ "$killed" -ge 10 ] || fail "only $killed of 12 runs were killed inside a save"
echo "train_gpt: killed at $killed points of a save: the checkpoint left always resumes bit for bit; the next run removes the partial save"

# 3. Damage is refused naming the file; so are another rank count, stage and model.
good="$scratch/ck1/step_00000010"
for file in "$good"/*; do
  name=$(basename "$file")
  bad="$scratch/flip/step_00000010"
  rm -rf "$scratch/flip"
  mkdir -p "$scratch/flip"
  cp -r "$good" "$bad"
  size=$(stat -c %s "$bad/$name")
  [ "$size" -gt 0 ] || continue
  python3 - "$bad/$name" "$size" <<'PY'
import sys
path, size = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(size // 2)
    b = f.read(1)
    f.seek(size // 2)
    f.write(bytes([b[0] ^ 0x10]))
PY
  if "$train" "${common[@]}" "${extra[@]}" --steps 11 --resume "$bad" >/dev/null 2>"$scratch/err.txt"; then
    fail "a byte flipped in $name was not refused"
  fi
  grep -q "$name" "$scratch/err.txt" || fail "flipped $name: the error does not name it: $(cat "$scratch/err.txt")"
done
rm -rf "$scratch/trunc" && cp -r "$good" "$scratch/trunc"
truncate -s 100 "$scratch/trunc/optimizer-rank0.bin"
"$train" "${common[@]}" "${extra[@]}" --steps 11 --resume "$scratch/trunc" 2>"$scratch/err.txt" &&
  fail "a truncated file was not refused"
grep -q "optimizer-rank0.bin" "$scratch/err.txt" || fail "truncation: $(cat "$scratch/err.txt")"
rm "$scratch/trunc/DONE"
"$train" "${common[@]}" "${extra[@]}" --steps 11 --resume "$scratch/trunc" 2>"$scratch/err.txt" &&
  fail "a checkpoint without DONE was loaded"
grep -q "no complete checkpoint" "$scratch/err.txt" || fail "no DONE: $(cat "$scratch/err.txt")"
runn 2 "${common[@]}" "${extra[@]}" --steps 11 --resume "$good" 2>"$scratch/err.txt" >/dev/null &&
  fail "another rank count was accepted"
grep -q "written by 1 ranks; this run has 2" "$scratch/err.txt" || fail "ranks: $(cat "$scratch/err.txt")"
"$train" "${common[@]}" "${extra[@]}" --zero-stage 2 --steps 11 --resume "$good" 2>"$scratch/err.txt" &&
  fail "another stage was accepted"
grep -q "is of ZeRO stage 3; this run is of stage 2" "$scratch/err.txt" || fail "stage: $(cat "$scratch/err.txt")"
"$train" "${common[@]}" --steps 11 --resume "$good" 2>"$scratch/err.txt" &&
  fail "another precision was accepted"
grep -q "holds the model" "$scratch/err.txt" || fail "model: $(cat "$scratch/err.txt")"
echo "train_gpt: flipped bytes in every file, truncation, no DONE, ranks, stage and model refused"

# 4. --keep-checkpoints and exporting a checkpoint.
ls "$scratch/ck1" | grep -qx step_00000005 && ls "$scratch/ck1" | grep -qx step_00000010 ||
  fail "--keep-checkpoints 2 did not keep steps 5 and 10"
"$train" "${common[@]}" "${extra[@]}" --resume "$scratch/ck1" --steps 0 \
  --export-safetensors "$scratch/out.safetensors" >/dev/null
[ -s "$scratch/out.safetensors" ] || fail "--steps 0 --export-safetensors wrote nothing"
echo "train_gpt: checkpoints kept as asked; a checkpoint exports without training"

# 5. A full disk: a tmpfs with room for one checkpoint and not two. The second save fails, the
# run stops with the error, and the first checkpoint is still complete and resumes bit for bit.
full="$scratch/full"
mkdir -p "$full"
if ! mount -t tmpfs -o size=900k tmpfs "$full" 2>/dev/null; then
  echo "train_gpt: full-disk case skipped: cannot mount a small tmpfs here (needs root)"
  exit 0
fi
trap 'umount "$full" 2>/dev/null || true' EXIT
if "$train" "${common[@]}" "${extra[@]}" --steps 9 --checkpoint-dir "$full" --checkpoint-every 3 \
  --keep-checkpoints 1 >/dev/null 2>"$scratch/err.txt"; then
  fail "two checkpoints fitted in 900 KiB; the full-disk case tests nothing"
fi
grep -q "No space left" "$scratch/err.txt" || fail "full disk: $(cat "$scratch/err.txt")"
[ "$(ls "$full")" = step_00000003 ] || fail "full disk left: $(ls "$full")"
"$train" "${common[@]}" "${extra[@]}" --steps 20 --resume "$full" | strip >"$scratch/full.txt"
diff -u <(tail -n 17 "$scratch/straight1.txt") "$scratch/full.txt" ||
  fail "full disk: the run resumed from the first checkpoint differs"
echo "train_gpt: a save that finds the disk full stops the run; the previous checkpoint resumes"
