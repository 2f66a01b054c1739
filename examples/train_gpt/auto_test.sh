#!/usr/bin/env bash
# --auto on three budget settings (none; a device too small for the whole model; that and a
# pinned host budget too small for the optimizer state): the choice fits (the run trains), and
# its measured step is no slower than 1.1 x the best of a grid of hand-set stage-3
# configurations measured in the same test under the same budget. Order A B..G G..B A: each
# configuration runs twice and keeps its faster median (noise only ever adds time), so that a
# noisy neighbour does not decide. Label slow; run alone (it times steps).
# Usage: auto_test.sh TRAIN_GPT SCRATCH_DIR
set -euo pipefail
train=$1
if [ "${STRATA_TIMING_TESTS:-0}" != 1 ]; then
  echo "SKIPPED: times steps; set STRATA_TIMING_TESTS=1 on a quiet machine to run it"
  exit 0
fi
scratch=$2/train_gpt_auto
rm -rf "$scratch"
mkdir -p "$scratch/nvme"
export STRATA_CACHE_DIR=$scratch/cache
common=(--device cpu --zero-stage 3 --layers 6 --channels 128 --batch 8 --digits 4 --steps 16
        --val-every 1000 --log-every 1000 --nvme-path "$scratch/nvme" --target-accuracy 1)
grid=("--param-gpu-fraction 0"
      "--param-gpu-fraction 0.5"
      "--param-gpu-fraction 1"
      "--offload-optimizer nvme --optimizer-nvme-fraction 0.5"
      "--offload-optimizer nvme --optimizer-nvme-fraction 1"
      "--offload-optimizer nvme --optimizer-nvme-fraction 1 --param-gpu-fraction 0.5"
      "--offload-activations cpu --checkpoint-interval 2"
      "--offload-optimizer nvme --optimizer-nvme-fraction 1 --offload-param nvme"
      "--offload-optimizer nvme --optimizer-nvme-fraction 1 --offload-activations cpu --checkpoint-interval 2")
# The median step time (ms) of steps 3.. of a run, or "refused" when the budget refuses it.
median_ms() {
  local log=$scratch/run.log metrics=$scratch/m.jsonl
  rm -f "$metrics"
  # shellcheck disable=SC2068
  if ! "$train" "${common[@]}" $@ --metrics "$metrics" >"$log" 2>&1; then
    if grep -q "out-of-memory" "$log"; then echo refused; return; fi
    echo "FAILED: train_gpt ${common[*]} $*" >&2
    grep -v '^strata info' "$log" | tail -5 >&2
    exit 1
  fi
  python3 - "$metrics" <<'PY'
import json, statistics, sys
ms = [json.loads(l)["ms"] for l in open(sys.argv[1]) if '"ms"' in l]
print("%.3f" % statistics.median(ms[2:]))
PY
}
fewer() { python3 -c "import sys; a, b = sys.argv[1:]; print(a if b == 'refused' or (a != 'refused' and float(a) <= float(b)) else b)" "$1" "$2"; }
for budget in "" "--gpu-memory-limit 6MiB" "--gpu-memory-limit 6MiB --host-memory-limit 16MiB"; do
  echo "== budget: ${budget:-none}"
  # shellcheck disable=SC2086
  first=$(median_ms --auto $budget)
  if [ "$first" = refused ]; then echo "FAILED: --auto found nothing under ${budget}" >&2; exit 1; fi
  grep -A1 "chose" "$scratch/run.log" | head -2
  declare -A best=()
  for pass in forward reverse; do
    order=("${grid[@]}")
    if [ $pass = reverse ]; then order=(); for ((i=${#grid[@]}-1; i>=0; i--)); do order+=("${grid[$i]}"); done; fi
    for g in "${order[@]}"; do
      # shellcheck disable=SC2086
      t=$(median_ms $g $budget)
      best[$g]=$(fewer "$t" "${best[$g]:-refused}")
    done
  done
  # shellcheck disable=SC2086
  last=$(median_ms --auto $budget)
  auto=$(fewer "$first" "$last")
  grid_best=refused
  for g in "${grid[@]}"; do
    printf '   %-70s %s ms\n' "$g" "${best[$g]}"
    grid_best=$(fewer "${best[$g]}" "$grid_best")
  done
  unset best
  printf '   %-70s %s ms (grid best %s ms)\n' "--auto" "$auto" "$grid_best"
  if [ "$grid_best" = refused ]; then echo "FAILED: no hand-set configuration fits ${budget}" >&2; exit 1; fi
  if ! python3 -c "import sys; sys.exit(0 if float('$auto') <= 1.1 * float('$grid_best') else 1)"; then
    echo "FAILED: under '${budget}' --auto's step ${auto} ms is over 1.1 x the grid's best ${grid_best} ms" >&2
    exit 1
  fi
done
echo "auto: every choice fits and is within 1.1x of the best hand-set configuration"
