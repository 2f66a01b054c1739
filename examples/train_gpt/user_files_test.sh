#!/usr/bin/env bash
# Nothing a user owns is lost (issue: signals, stale swap files, inputs never written, outputs
# checked before training, non-finite runs stopped, resume exact or refused):
#   1. SIGTERM mid-step and during a save, at 1 and 2 ranks (under mpirun, to one rank): every
#      rank stops, exit 143 with one line saying what was kept, the step lines are in the log,
#      no swap file is left, and the checkpoint directory resumes; a second SIGINT exits at once;
#   2. the swap file of a killed run (SIGKILL) is removed by the next run on its directory, one
#      of a live run is kept;
#   3. each output equal to an input (any spelling, a hard link) is refused naming both flags,
#      and the input is unchanged; nothing is created;
#   4. a token file truncated under a running job stops it with a line naming the file;
#   5. fp16 at its minimum loss scale stops; a model file holding NaN is refused naming the
#      tensor;
#   6. an output that cannot be written is refused before step 1; --config naming a directory
#      is one line;
#   7. --resume with another --layers, --seed or --batch is refused naming each; the run's
#      own values are taken when not given; --resume-override lets the run flags differ.
# Usage: user_files_test.sh MPIEXEC TRAIN_GPT SCRATCH_DIR
set -uo pipefail
mpiexec=$1
train=$2
scratch=$3/train_gpt_user_files
rm -rf "$scratch"
mkdir -p "$scratch/nvme"
s=$scratch
root_flag=()
if [ "$(id -u)" = 0 ]; then root_flag=(--allow-run-as-root); fi
runn() { local n=$1; shift; "$mpiexec" "${root_flag[@]}" --oversubscribe -np "$n" "$train" "$@"; }
fail() { echo "FAILED: $*" >&2; exit 1; }
# A failure stops the runs this script started in the background (a training run left behind
# would hold both cores for hours).
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
no_swap_files() { ! ls "$1" | grep -q strata_swap_ || fail "$2: swap files left: $(ls "$1")"; }
# Waits until FILE has N lines starting with "step" (at most 180 s: a first run of a model
# shape calibrates its compute rate before step 1, about a minute for the larger model below on a
# 2-core machine with an empty cache).
wait_steps() {
  for _ in $(seq 1800); do
    [ "$(grep -c '^step' "$1" 2>/dev/null)" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "no $2 step lines in $1: $(cat "$1")"
}
python3 - "$s/tok.bin" <<'PY'
import random, struct, sys
random.seed(3)
t = [random.randrange(13) for _ in range(200000)]
h = [20240520, 1, len(t)] + [0] * 253
open(sys.argv[1], "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(t), *t))
PY
common=(--device cpu --layers 2 --channels 32 --batch 8 --log-every 1 --val-every 100000
        --target-accuracy 1.0)
nvme=(--offload-optimizer nvme --optimizer-nvme-fraction 1 --nvme-path "$s/nvme")

# 1. Signals.
for n in 1 2; do
  log="$s/sig$n.txt"
  if [ "$n" = 1 ]; then
    "$train" "${common[@]}" "${nvme[@]}" --steps 100000 --metrics "$s/m$n.jsonl" >"$log" 2>&1 &
  else
    runn 2 "${common[@]}" "${nvme[@]}" --steps 100000 --metrics "$s/m$n.jsonl" >"$log" 2>&1 &
  fi
  pid=$!
  wait_steps "$log" 3
  # One rank only (under mpirun: the newest train_gpt process, a rank).
  target=$pid
  [ "$n" = 2 ] && target=$(pgrep -n -f "$train .*m2.jsonl")
  kill -TERM "$target"
  wait "$pid"
  rc=$?
  [ "$rc" -ne 0 ] || fail "$n ranks: SIGTERM mid-step exited 0"
  [ "$n" = 1 ] && { [ "$rc" -eq 143 ] || fail "1 rank: SIGTERM exit $rc, not 143"; }
  grep -q "terminated (SIGTERM) before step" "$log" || fail "$n ranks: no interrupt line: $(tail -5 "$log")"
  steps=$(grep -c '^step' "$log")
  [ "$(wc -l <"$s/m$n.jsonl")" -eq "$steps" ] ||
    fail "$n ranks: $steps step lines, $(wc -l <"$s/m$n.jsonl") metrics records"
  no_swap_files "$s/nvme" "$n ranks, SIGTERM mid-step"
done
echo "train_gpt: SIGTERM mid-step (1 rank; one of 2 ranks): all stop, step lines kept, no swap file"

# During a save: the signal arrives at the 3rd write of the first checkpoint (every rank), the
# save completes (in the background of the next step), the run stops at the next step boundary,
# and the checkpoint resumes.
for n in 1 2; do
  ck="$s/ck$n"
  log="$s/save$n.txt"
  if [ "$n" = 1 ]; then
    STRATA_TEST_CHECKPOINT_SIGNAL=15 STRATA_TEST_CHECKPOINT_KILL=3 "$train" "${common[@]}" \
      "${nvme[@]}" --zero-stage 1 --steps 10 --checkpoint-dir "$ck" --checkpoint-every 2 \
      >"$log" 2>&1
  else
    STRATA_TEST_CHECKPOINT_SIGNAL=15 STRATA_TEST_CHECKPOINT_KILL=3 runn 2 "${common[@]}" \
      "${nvme[@]}" --zero-stage 1 --steps 10 --checkpoint-dir "$ck" --checkpoint-every 2 \
      >"$log" 2>&1
  fi
  rc=$?
  [ "$rc" -ne 0 ] || fail "$n ranks: SIGTERM during a save exited 0"
  grep -q "before step [34] of 10.*kept: the checkpoint of step 2" "$log" ||
    fail "$n ranks, during a save: $(tail -5 "$log")"
  [ "$(ls "$ck")" = step_00000002 ] || fail "$n ranks, during a save: $ck holds $(ls "$ck")"
  no_swap_files "$s/nvme" "$n ranks, SIGTERM during a save"
  if [ "$n" = 1 ]; then
    "$train" "${common[@]}" "${nvme[@]}" --zero-stage 1 --steps 4 --resume "$ck" >"$log" 2>&1
  else
    runn 2 "${common[@]}" "${nvme[@]}" --zero-stage 1 --steps 4 --resume "$ck" >"$log" 2>&1
  fi
  [ "$(grep -c '^step' "$log")" -eq 2 ] || fail "$n ranks: the checkpoint did not resume: $(tail -3 "$log")"
done
echo "train_gpt: SIGTERM during a save (1 and 2 ranks): the save completes, the run stops, it resumes"

# A second signal exits at once: steps of about a second (a larger model), the first SIGINT noted
# mid-step, the second a moment later, before the step can end.
log="$s/twice.txt"
"$train" --device cpu --layers 4 --channels 512 --heads 8 --batch 128 --log-every 1 \
  --target-accuracy 1.0 "${nvme[@]}" --steps 100000 >"$log" 2>&1 &
pid=$!
wait_steps "$log" 1
kill -INT "$pid"
sleep 0.1
kill -INT "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 130 ] || fail "two SIGINTs: exit $rc, not 130"
grep -q "strata: interrupted (SIGINT); exiting now" \
  "$log" || fail "two SIGINTs: no immediate exit: $(tail -3 "$log")"
grep -q "before step" "$log" && fail "two SIGINTs: the run stopped at a step boundary instead"
no_swap_files "$s/nvme" "two SIGINTs"
echo "train_gpt: a second SIGINT exits at once (130), removing the swap files"

# 2. Stale swap files.
"$train" "${common[@]}" "${nvme[@]}" --steps 100000 >"$s/killed.txt" 2>&1 &
pid=$!
wait_steps "$s/killed.txt" 2
kill -KILL "$pid"
wait "$pid" 2>/dev/null
stale=$(ls "$s/nvme" | grep strata_swap_) || fail "SIGKILL left no swap file to clean up"
# A live run's file: a sleeping process owns it (its record: host, boot id, pid, start time).
sleep 300 &
sleeper=$!
python3 - "$s/nvme" "$sleeper" <<'PY'
import socket, sys
d, pid = sys.argv[1], int(sys.argv[2])
stat = open(f"/proc/{pid}/stat").read()
start = stat[stat.rindex(")") + 2:].split()[19]
boot = open("/proc/sys/kernel/random/boot_id").read().strip()
rec = f"strata swap owner v1\nhost={socket.gethostname()}\nboot_id={boot}\npid={pid}\nstart_ticks={start}\n"
open(f"{d}/strata_swap_{pid}_0_0.bin", "wb").write(b"\0" * 8192 + rec.encode().ljust(4096, b"\0"))
PY
"$train" "${common[@]}" "${nvme[@]}" --steps 2 >"$s/next.txt" 2>&1 || fail "the next run: $(cat "$s/next.txt")"
grep -q "removed $s/nvme/$stale, a swap file left by a run that is gone" "$s/next.txt" ||
  fail "the stale swap file was not reported: $(cat "$s/next.txt")"
[ "$(ls "$s/nvme")" = "strata_swap_${sleeper}_0_0.bin" ] ||
  fail "after the next run, the NVMe directory holds: $(ls "$s/nvme")"
kill "$sleeper"
rm -f "$s/nvme/strata_swap_${sleeper}_0_0.bin"
echo "train_gpt: a killed run's swap file is removed by the next run; a live run's is kept"

# 3. Inputs are never written.
"$train" "${common[@]}" --steps 2 --save-model "$s/model.bin" >/dev/null 2>&1 || fail "saving a model"
echo '{"gradient_clipping": 1.0}' >"$s/ds.json"
ln "$s/tok.bin" "$s/tok-link.bin"
mkdir -p "$s/sub"
tok=(--data "$s/tok.bin" --vocab 13 --seq-len 16)
cases=(
  "${tok[*]} --metrics $s/tok.bin|--metrics $s/tok.bin is the file --data reads"
  "${tok[*]} --metrics $s/sub/../tok-link.bin|--metrics $s/sub/../tok-link.bin is the file --data reads"
  "${tok[*]} --val-data $s/tok.bin --metrics $s/tok.bin|--metrics $s/tok.bin is the file --data reads"
  "--init-from $s/model.bin --metrics $s/model.bin|--metrics $s/model.bin is the file --init-from reads"
  "${tok[*]} --trace $s/tok.bin|--trace $s/tok.bin is the file --data reads"
  "--init-from $s/model.bin --save-model $s/model.bin|--save-model $s/model.bin is the file --init-from reads"
  "--config $s/ds.json --export-safetensors $s/ds.json|--export-safetensors $s/ds.json is the file --config reads"
  "--metrics $s/out.json --trace $s/out.json|--trace $s/out.json is also --metrics's file"
  "--init-from $s/model.bin --checkpoint-dir $s --checkpoint-every 1|--init-from $s/model.bin lies in --checkpoint-dir $s"
)
sums=$(md5sum "$s/tok.bin" "$s/model.bin" "$s/ds.json")
before=$(find "$s" | sort)
for c in "${cases[@]}"; do
  args=${c%%|*}
  want=${c#*|}
  # shellcheck disable=SC2086
  "$train" "${common[@]}" --steps 2 $args >"$s/out.txt" 2>"$s/err.txt"
  rc=$?
  if [ "$rc" -eq 0 ] || [ "$(grep -c '^train_gpt:' "$s/err.txt")" -ne 1 ] ||
    ! grep -qF -- "$want" "$s/err.txt" || grep -q '^step' "$s/out.txt"; then
    fail "train_gpt $args (exit $rc): want one line with: $want; got: $(cat "$s/err.txt")"
  fi
done
rm -f "$s/out.txt" "$s/err.txt"
[ "$sums" = "$(md5sum "$s/tok.bin" "$s/model.bin" "$s/ds.json")" ] || fail "an input changed"
[ "$before" = "$(find "$s" | sort)" ] || fail "refused runs created files"
echo "train_gpt: ${#cases[@]} outputs equal to inputs refused naming both flags; inputs unchanged"

# An output inside the checkpoint --resume reads.
"$train" "${common[@]}" --steps 2 --checkpoint-dir "$s/ckr" --checkpoint-every 2 >/dev/null 2>&1
"$train" "${common[@]}" --steps 3 --resume "$s/ckr" --save-model "$s/ckr/step_00000002/params.bin" \
  >/dev/null 2>"$s/err.txt" && fail "--save-model into the resumed checkpoint was accepted"
grep -q "lies in the checkpoint --resume reads" "$s/err.txt" || fail "resume tree: $(cat "$s/err.txt")"

# 4. A token file truncated under a running job.
cp "$s/tok.bin" "$s/shrinks.bin"
log="$s/shrink.txt"
"$train" "${common[@]}" --data "$s/shrinks.bin" --vocab 13 --seq-len 16 --steps 100000 >"$log" 2>&1 &
pid=$!
wait_steps "$log" 3
truncate -s 2048 "$s/shrinks.bin"
wait "$pid"
rc=$?
[ "$rc" -eq 1 ] || fail "a truncated token file: exit $rc"
grep -q "token file $s/shrinks.bin: changed under the run" "$log" ||
  fail "a truncated token file: $(tail -3 "$log")"
echo "train_gpt: a token file truncated under the run stops it, naming the file"

# 5. Non-finite values.
# The issue's run: it used to skip every step at scale 1 and exit 0. It stops now, on the loss or
# on the scale, whichever goes first.
"$train" "${common[@]}" --precision fp16 --lr 1 --grad-clip 0 --initial-scale-power 3 \
  --steps 500 >"$s/fp16.txt" 2>&1 && fail "fp16 with --lr 1 ran to the end"
grep -qE "the gradients overflow with the fp16 loss scale already at its minimum|the loss is -?(nan|inf)" \
  "$s/fp16.txt" || fail "fp16 --lr 1: $(tail -3 "$s/fp16.txt")"
# At its minimum from the start (2^30, whose gradients overflow fp16), with no hysteresis: the
# first overflow stops the run, at step 1.
"$train" "${common[@]}" --precision fp16 --initial-scale-power 30 --min-loss-scale 1073741824 \
  --hysteresis 1 --steps 5 >"$s/fp16.txt" 2>&1 && fail "fp16 at its minimum scale ran to the end"
grep -q "step 1: the gradients overflow with the fp16 loss scale already at its minimum" \
  "$s/fp16.txt" || fail "fp16 at its minimum: $(tail -3 "$s/fp16.txt")"
cp "$s/model.bin" "$s/nan.bin"
python3 - "$s/nan.bin" <<'PY'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    h = struct.unpack("<256i", f.read(1024))
    vp, c, seq = h[7], h[6], h[2]
    # The first value after wte and wpe: ln1w of layer 0 (bf16 NaN).
    f.seek(1024 + 2 * (vp * c + seq * c))
    f.write(struct.pack("<H", 0x7FC0))
PY
"$train" "${common[@]}" --init-from "$s/nan.bin" --steps 2 >/dev/null 2>"$s/err.txt" &&
  fail "a model file holding NaN was accepted"
grep -q "model file $s/nan.bin: tensor ln1w of layer 0 holds nan at element 0" "$s/err.txt" ||
  fail "NaN model: $(cat "$s/err.txt")"
echo "train_gpt: fp16 stops at its minimum scale; a model holding NaN is refused naming the tensor"

# 6. Outputs that cannot be written, refused before step 1; --config naming a directory.
for flag in --save-model --export-safetensors --metrics --trace; do
  "$train" "${common[@]}" --steps 2 "$flag" /proc/strata_out.bin >"$s/out.txt" 2>"$s/err.txt" &&
    fail "$flag on a file system that takes no file was accepted"
  grep -q -- "$flag /proc/strata_out.bin: cannot write in /proc" "$s/err.txt" ||
    fail "$flag: $(cat "$s/err.txt")"
  grep -q '^step' "$s/out.txt" && fail "$flag: trained before refusing"
done
"$train" "${common[@]}" --steps 2 --config "$s/sub" >/dev/null 2>"$s/err.txt"
rc=$?
[ "$rc" -eq 1 ] && grep -q "^train_gpt: .*--config $s/sub is a directory" "$s/err.txt" ||
  fail "--config DIR: exit $rc: $(cat "$s/err.txt")"
echo "train_gpt: outputs that cannot be written refused before step 1; --config DIR in one line"

# Two runs on one checkpoint directory: the second is refused while the first holds it.
log="$s/first.txt"
"$train" "${common[@]}" --steps 100000 --checkpoint-dir "$s/ckl" --checkpoint-every 1000 >"$log" 2>&1 &
pid=$!
wait_steps "$log" 2
"$train" "${common[@]}" --steps 2 --checkpoint-dir "$s/ckl" --checkpoint-every 1 >/dev/null 2>"$s/err.txt" &&
  fail "a second run on one checkpoint directory was accepted"
grep -q -- "--checkpoint-dir $s/ckl is being written by another run" "$s/err.txt" ||
  fail "second run: $(cat "$s/err.txt")"
kill -TERM "$pid"
wait "$pid"
[ -z "$(ls -A "$s/ckl")" ] || fail "the checkpoint directory holds: $(ls -A "$s/ckl")"
# Optimizer shares that add up to at most 1 are accepted, whatever the rounding; the share
# reached is printed beside the one asked for.
# (The default model, where the two used to claim one partition.)
"$train" --device cpu --target-accuracy 1.0 --offload-optimizer nvme --nvme-path "$s/nvme" \
  --optimizer-nvme-fraction 0.5 --gpu-optimizer-fraction 0.3 --steps 2 >"$s/shares.txt" 2>&1 ||
  fail "shares: $(tail -2 "$s/shares.txt")"
grep -q "NVMe share [0-9.]* (--optimizer-nvme-fraction 0.5, rounded to whole partitions" \
  "$s/shares.txt" || fail "shares: $(grep optimizer: "$s/shares.txt")"
# --plan of a model far larger than this machine, against a limit no pool here can reserve.
"$train" --device cpu --plan --model gpt-13b --gpu-memory-limit 100TiB >"$s/plan.txt" 2>&1 ||
  fail "--plan with a 100 TiB limit: $(tail -2 "$s/plan.txt")"
grep -q "^fits: yes" "$s/plan.txt" || fail "--plan with a 100 TiB limit: $(tail -2 "$s/plan.txt")"
echo "train_gpt: one run per checkpoint directory; optimizer shares accepted; --plan of any size"

# 7. Resume is exact or refused.
ck="$s/ckx"
# Without --batch: the checkpoint's is taken when not given.
common=(--device cpu --layers 2 --channels 32 --log-every 1 --val-every 100000 --target-accuracy 1.0)
"$train" "${common[@]}" "${tok[@]}" --data-order shuffled --seed 7 --batch 4 --steps 2 \
  --checkpoint-dir "$ck" --checkpoint-every 2 >/dev/null 2>&1 || fail "writing a checkpoint"
for c in "--layers 3|--layers 3 (the checkpoint's 2)" "--seed 8|--seed 8 (the checkpoint's 7)" \
  "--batch 6|--batch 6 (the checkpoint's 4)" "--layers 4 --heads 8|--layers 4 (the checkpoint's 2), --heads 8 (the checkpoint's 4)"; do
  args=${c%%|*}
  want=${c#*|}
  # shellcheck disable=SC2086
  "$train" "${common[@]}" "${tok[@]}" --data-order shuffled --steps 3 --resume "$ck" $args \
    >/dev/null 2>"$s/err.txt" && fail "--resume with $args was accepted"
  grep -qF -- "$want" "$s/err.txt" || fail "--resume with $args: $(cat "$s/err.txt")"
done
# Not given: the checkpoint's seed and batch; the run continues as the straight one.
"$train" "${common[@]}" "${tok[@]}" --data-order shuffled --seed 7 --batch 4 --steps 3 \
  >"$s/straight.txt" 2>&1
"$train" "${common[@]}" "${tok[@]}" --data-order shuffled --steps 3 --resume "$ck" >"$s/resumed.txt" 2>&1 ||
  fail "resume without the run flags: $(cat "$s/resumed.txt")"
[ "$(grep '^step *3/' "$s/straight.txt" | cut -d'|' -f1-3)" = "$(grep '^step *3/' "$s/resumed.txt" | cut -d'|' -f1-3)" ] ||
  fail "resume without the run flags differs from the straight run"
"$train" "${common[@]}" "${tok[@]}" --data-order shuffled --batch 6 --steps 3 --resume "$ck" \
  --resume-override >"$s/over.txt" 2>&1 || fail "--resume-override: $(cat "$s/over.txt")"
grep -q "resume: --batch 6 (the checkpoint's 4), as --resume-override allows" "$s/over.txt" ||
  fail "--resume-override: $(cat "$s/over.txt")"
echo "train_gpt: --resume with another shape, seed or batch refused naming each; --resume-override"

# A resumed run's --metrics: one record a step (the records after the checkpoint are dropped).
common+=(--batch 8)
"$train" "${common[@]}" --steps 4 --checkpoint-dir "$s/ckm" --checkpoint-every 2 --keep-checkpoints 0 \
  --metrics "$s/resumed.jsonl" >/dev/null 2>&1 || fail "metrics run"
"$train" "${common[@]}" --steps 4 --resume "$s/ckm/step_00000002" --metrics "$s/resumed.jsonl" \
  >/dev/null 2>&1 || fail "metrics resume"
python3 - "$s/resumed.jsonl" <<'PY' || fail "--metrics after resume: $(cat "$s/resumed.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r["step"] for r in recs if "loss" in r]
vals = [r["step"] for r in recs if "val_loss" in r]
sys.exit(0 if steps == [1, 2, 3, 4] and vals == [4] else 1)
PY
echo "train_gpt: a resumed --metrics file holds one record a step"

# No run of this test left swap or probe files behind.
no_swap_files "$s/nvme" "the end"
find "$s" -name '.strata_probe_*' | grep -q . && fail "probe files left"
echo "train_gpt: user files test passed"
