#!/usr/bin/env bash
# strata on two machines, rehearsed on one: two network namespaces, each with a host name and an
# NVMe directory of its own (UTS and mount namespaces: the same --nvme-path is another directory
# on each "host"), joined by a virtual Ethernet link, and mpirun started on the first with a
# hostfile of the two addresses (2 ranks each, TCP; the second host's daemon is started through
# an rsh agent that enters its namespaces, where a real cluster uses ssh). Checked:
#   1. stage 3 with the parameters and the optimizer state on each host's own NVMe directory and
#      checkpoints to a directory both see trains to the bits of the same 4 ranks on one host
#      (every step line, the saved model file);
#   2. each host's ranks are local ranks 0 and 1 of 2 there, and each host's swap files were in
#      its own directory; none is left behind on either;
#   3. the two-host run's step-3 checkpoint resumed by 4 ranks on one host ends with the same
#      model file (a run moved to another set of machines with as many ranks);
#   4. a --checkpoint-dir that is another directory on each host is refused before step 1 in one
#      line naming it and the ranks that do not see it.
# Skipped (with the reason) where network namespaces cannot be made (not root, no iproute2).
# Usage: two_hosts_test.sh MPIEXEC TRAIN_GPT SCRATCH_DIR
set -uo pipefail
mpiexec=$1
train=$2
scratch=$3/train_gpt_two_hosts
fail() { echo "FAILED: $*" >&2; exit 1; }
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
  echo "SKIPPED: needs root, ip (iproute2) and unshare to make network namespaces"
  exit 0
fi
rm -rf "$scratch"
mkdir -p "$scratch"/{nvme,disk_h1,disk_h2,nvme_one,ckpt,ckpt_h1,ckpt_h2,ckpt_split}
ns1=strata_h1_$$ ns2=strata_h2_$$ v1=sv$$a v2=sv$$b
cleanup() { ip netns del "$ns1" 2>/dev/null; ip netns del "$ns2" 2>/dev/null; }
trap cleanup EXIT
if ! ip netns add "$ns1" 2>"$scratch/netns.err" || ! ip netns add "$ns2" 2>>"$scratch/netns.err" ||
  ! ip link add "$v1" type veth peer name "$v2" 2>>"$scratch/netns.err"; then
  echo "SKIPPED: network namespaces cannot be made here: $(head -1 "$scratch/netns.err")"
  exit 0
fi
ip link set "$v1" netns "$ns1" && ip link set "$v2" netns "$ns2" &&
  ip -n "$ns1" addr add 10.213.0.1/24 dev "$v1" && ip -n "$ns2" addr add 10.213.0.2/24 dev "$v2" &&
  ip -n "$ns1" link set "$v1" up && ip -n "$ns2" link set "$v2" up &&
  ip -n "$ns1" link set lo up && ip -n "$ns2" link set lo up || fail "could not wire the two hosts"
# host address -> namespace and disk; the agent enters them as ssh would log in.
echo "$ns1 h1" >"$scratch/host_10.213.0.1"
echo "$ns2 h2" >"$scratch/host_10.213.0.2"
printf '10.213.0.1 slots=2\n10.213.0.2 slots=2\n' >"$scratch/hostfile"
cat >"$scratch/agent" <<AGENT
#!/usr/bin/env bash
while [[ \$# -gt 0 && \$1 == -* ]]; do shift; done
read -r ns name <"$scratch/host_\$1"; shift
split=""  # the test's last case: a checkpoint directory of each host's own
[ -e "$scratch/split_ckpt" ] && split="mount --bind $scratch/ckpt_\$name $scratch/ckpt_split &&"
exec ip netns exec "\$ns" unshare --uts --mount --propagation private sh -c \
  "hostname \$name && mount --bind $scratch/disk_\$name $scratch/nvme && \$split \$*"
AGENT
chmod +x "$scratch/agent"

flags=(--device cpu --layers 3 --channels 32 --batch 4 --zero-stage 3 --offload-param nvme
       --offload-optimizer nvme --optimizer-nvme-fraction 1 --log-every 1 --val-every 1000
       --target-accuracy 1.0)
# The step lines without the machine's figures.
strip() { grep -E '^step' | sed -E 's/ \| [0-9.]+ ms \| .*//'; }

# 1. Two hosts. A watcher notes which host directories held swap files while it ran.
(while [ ! -e "$scratch/done" ]; do
  [ -n "$(ls "$scratch/disk_h1")" ] && touch "$scratch/seen_h1"
  [ -n "$(ls "$scratch/disk_h2")" ] && touch "$scratch/seen_h2"
  sleep 0.02
done) &
watcher=$!
ip netns exec "$ns1" unshare --uts --mount --propagation private sh -c \
  "hostname h1 && mount --bind $scratch/disk_h1 $scratch/nvme && \
   timeout 300 $mpiexec --allow-run-as-root --hostfile $scratch/hostfile -np 4 \
     --mca plm_rsh_agent $scratch/agent --mca btl tcp,self \
     --mca btl_tcp_if_include 10.213.0.0/24 --mca oob_tcp_if_include 10.213.0.0/24 \
     $train ${flags[*]} --steps 6 --nvme-path $scratch/nvme --checkpoint-dir $scratch/ckpt \
     --checkpoint-every 3 --save-model $scratch/two.bin" >"$scratch/two.txt" 2>&1
rc=$?
touch "$scratch/done"
wait "$watcher"
[ "$rc" = 0 ] || { cat "$scratch/two.txt" >&2; fail "the two-host run exited $rc"; }
grep -q "zero: stage 3 over 4 ranks" "$scratch/two.txt" || fail "no 4-rank stage-3 run"
# 2. Local ranks per host, swap files per host, none left.
for r in 0 2; do
  grep -q "^placement rank $r: local 0/2" "$scratch/two.txt" || fail "rank $r is not local 0/2"
done
for r in 1 3; do
  grep -q "^placement rank $r: local 1/2" "$scratch/two.txt" || fail "rank $r is not local 1/2"
done
[ -e "$scratch/seen_h1" ] && [ -e "$scratch/seen_h2" ] ||
  fail "swap files were not seen in both hosts' directories (h1: $([ -e "$scratch/seen_h1" ] && echo yes || echo no), h2: $([ -e "$scratch/seen_h2" ] && echo yes || echo no))"
left=$(find "$scratch/disk_h1" "$scratch/disk_h2" "$scratch/nvme" -mindepth 1)
[ -z "$left" ] || fail "swap files left behind: $left"
[ -d "$scratch/ckpt/step_00000003" ] || fail "no step-3 checkpoint in the shared directory"

# 1. The same 4 ranks on one host: the same bits.
root=(--allow-run-as-root --oversubscribe)
"$mpiexec" "${root[@]}" -np 4 "$train" "${flags[@]}" --steps 6 --nvme-path "$scratch/nvme_one" \
  --save-model "$scratch/one.bin" >"$scratch/one.txt" 2>&1 ||
  { cat "$scratch/one.txt" >&2; fail "the one-host run failed"; }
diff <(strip <"$scratch/two.txt") <(strip <"$scratch/one.txt") ||
  fail "two hosts and one host print different step lines"
[ "$(strip <"$scratch/one.txt" | wc -l)" = 6 ] || fail "expected 6 step lines"
cmp "$scratch/two.bin" "$scratch/one.bin" || fail "two hosts and one host save different models"

# 3. The two-host checkpoint resumed on one host.
"$mpiexec" "${root[@]}" -np 4 "$train" "${flags[@]}" --steps 6 --nvme-path "$scratch/nvme_one" \
  --resume "$scratch/ckpt/step_00000003" --save-model "$scratch/resumed.bin" \
  >"$scratch/resumed.txt" 2>&1 || { cat "$scratch/resumed.txt" >&2; fail "the resume failed"; }
diff <(strip <"$scratch/one.txt" | tail -3) <(strip <"$scratch/resumed.txt") ||
  fail "the resumed steps differ from the straight run's"
cmp "$scratch/resumed.bin" "$scratch/one.bin" || fail "the resumed run saves another model"
# 4. A checkpoint directory that is another directory on each host is refused before step 1,
# naming it and the ranks that do not see rank 0's files.
touch "$scratch/split_ckpt"
ip netns exec "$ns1" unshare --uts --mount --propagation private sh -c \
  "hostname h1 && mount --bind $scratch/disk_h1 $scratch/nvme && \
   mount --bind $scratch/ckpt_h1 $scratch/ckpt_split && \
   timeout 300 $mpiexec --allow-run-as-root --hostfile $scratch/hostfile -np 4 \
     --mca plm_rsh_agent $scratch/agent --mca btl tcp,self \
     --mca btl_tcp_if_include 10.213.0.0/24 --mca oob_tcp_if_include 10.213.0.0/24 \
     $train ${flags[*]} --steps 6 --nvme-path $scratch/nvme --checkpoint-dir $scratch/ckpt_split \
     --checkpoint-every 3" >"$scratch/split.txt" 2>&1
rc=$?
[ "$rc" != 0 ] || fail "a checkpoint directory of each host's own was accepted"
grep -q "^step" "$scratch/split.txt" && fail "a step ran before the refusal"
want="--checkpoint-dir: directory $scratch/ckpt_split is not the same directory on every rank: ranks 2, 3 do not see"
[ "$(grep -c -- "$want" "$scratch/split.txt")" = 1 ] || { cat "$scratch/split.txt" >&2; fail "expected one line: $want"; }
[ -z "$(find "$scratch/ckpt_h1" "$scratch/ckpt_h2" -mindepth 1)" ] || fail "the probe file was left behind"
echo "two hosts: 4 ranks over two network namespaces give the bits of 4 ranks on one host"
