#!/usr/bin/env bash
# bench_trainer: what train_gpt adds to the engine's step. The same configuration as bench_step's
# "ram" case (GPT L=8 C=384 NH=6, B=1 T=8 bf16, no clipping, CpuDevice 1 thread, host lane 1
# thread, optimizer state in host RAM) run by bench_step (the planned step alone, median of its timed
# steps) and by train_gpt on an llm.c token file (median wall-clock time between consecutive
# steps, from --metrics' elapsed_s: data, engine, metrics and the step lines). The two alternate,
# 5 times each (3 with --quick), after a warm-up of each; the table gives each pair and the
# trainer's time outside the engine's step, the final JSON line the median ratio with its range
# and the median share of the trainer's step spent outside the engine.
# Usage: bench/step/bench_trainer.sh [--quick] [BUILD_DIR]
set -euo pipefail
repeats=5
build=build
for a in "$@"; do
  case $a in
    --quick) repeats=3 ;;
    *) build=$a ;;
  esac
done
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
python3 - "$scratch/tokens.bin" <<'PY'
import struct, sys
t = [(i * 7) % 13 for i in range(20000)]
h = [20240520, 1, len(t)] + [0] * 253
open(sys.argv[1], "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(t), *t))
PY
engine() {
  "$build/bench/step/bench_step" --quick --repeats 15 2>/dev/null | tail -1 |
    python3 -c 'import json,sys; print(8 / json.load(sys.stdin)["ram"]["tokens_per_s"] * 1e3)'
}
trainer() {
  "$build/examples/train_gpt/train_gpt" --device cpu --device-threads 1 --host-threads 1 \
    --layers 8 --channels 384 --heads 6 --batch 1 --seq-len 8 --vocab 13 --grad-clip 0 \
    --lr 1e-4 --data "$scratch/tokens.bin" --steps 16 --metrics "$scratch/m.jsonl" \
    >/dev/null 2>&1
  # The median step (wall-clock between steps) and the median time outside the engine's step
  # (that wall-clock less the step's own "ms").
  python3 - "$scratch/m.jsonl" <<'PY'
import json, statistics, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "elapsed_s" in r][1:]
walls = [(b["elapsed_s"] - a["elapsed_s"]) * 1e3 for a, b in zip(rows, rows[1:])]
outside = [w - b["ms"] for w, b in zip(walls, rows[1:])]
print(statistics.median(walls), statistics.median(outside))
PY
}
engine >/dev/null
trainer >/dev/null
printf '%-8s %12s %12s %8s %12s\n' repeat "engine ms" "trainer ms" ratio "outside ms"
ratios=()
outs=()
for r in $(seq 1 "$repeats"); do
  if [ $((r % 2)) -eq 1 ]; then
    e=$(engine)
    read -r t o < <(trainer)
  else
    read -r t o < <(trainer)
    e=$(engine)
  fi
  ratio=$(python3 -c "print($t / $e)")
  ratios+=("$ratio")
  outs+=("$(python3 -c "print($o / $t)")")
  printf '%-8s %12.2f %12.2f %8.3f %12.3f\n' "$r" "$e" "$t" "$ratio" "$o"
done
python3 - "${ratios[*]}" "${outs[*]}" <<'PY'
import json, statistics, sys
r = sorted(float(x) for x in sys.argv[1].split())
o = [float(x) for x in sys.argv[2].split()]
print(json.dumps({"bench": "trainer", "trainer_over_engine": statistics.median(r),
                  "min": r[0], "max": r[-1], "repeats": len(r),
                  "outside_engine_fraction": statistics.median(o)}))
PY
