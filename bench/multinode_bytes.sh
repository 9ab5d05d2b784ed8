#!/usr/bin/env bash
# bench/multinode_bytes.sh: the bytes each rank sends per optimizer step, as zero-mem predicts
# them (its step model's collectives, per link) and as the nodes' network devices count them
# while zero-train runs, for the flat, hybrid and hpZ layouts. Run it through
# tests/multinode/nodes.sh, which makes the nodes (root):
#
#   tests/multinode/nodes.sh 2 2 -- bench/multinode_bytes.sh BUILD [MODEL [SEQ [STAGE [TOL [REUSE [QUANT]]]]]]
#
# BUILD is the build directory (zero-run, zero-train, zero-mem); MODEL a zero-train model (tiny),
# SEQ its tokens per sequence (32), STAGE the ZeRO stage (3), TOL the relative difference
# allowed (0.15), REUSE stage3_max_reuse_distance (0: backward gathers every parameter again;
# larger keeps the last modules of forward gathered for backward), QUANT 1 for ZeRO++'s
# quantized gathers and gradients (zero_quantized_weights, zero_quantized_gradients; 0 by
# default). Open MPI sends over TCP alone (btl tcp,self), so a rank's bytes to a rank on
# its node go through its node's loopback device and to another node through its veth. zero's
# MPI collectives send what zero-mem's ring model counts (a ring all-reduce and all-gather, and
# a reduce-scatter as an all-to-all: (n-1)/n of the buffer). Each layout trains 1 and then 3
# steps; half the difference of the nodes' transmitted bytes, over the ranks, is one step's,
# with start-up and shutdown cancelled out.
#
# Prints one line per layout (flat, hybrid, and at stage 3 hpZ with a secondary group per
# node): zero-mem's bytes per rank within a node and across nodes, and the measured ones (IP
# and TCP headers included: a few percent more). Exits 1 when the measured total differs from
# the predicted total by more than TOL, or, for hybrid, the bytes across nodes do (its
# collectives each run within a node or with one rank per node, so its split does not depend
# on the algorithm; a collective over the world's sends some of its bytes within the node).
set -euo pipefail
build=$1 model=${2:-tiny} seq=${3:-32} stage=${4:-3} tol=${5:-0.15} reuse=${6:-0} quant=${7:-0}
quantized=false
[[ $quant == 1 ]] && quantized=true
[[ -n ${ZERO_NODES_HOSTFILE:-} ]] || {
  echo "bench/multinode_bytes.sh: run me through tests/multinode/nodes.sh" >&2
  exit 2
}
source_dir=$(cd "$(dirname "$0")/.." && pwd)
nodes=$(wc -l <"$ZERO_NODES_HOSTFILE")
slots=$(awk -F'slots=' 'NR == 1 {print $2}' "$ZERO_NODES_HOSTFILE")
ranks=$((nodes * slots))
work=$ZERO_NODES_WORK/bytes
mkdir -p "$work"
export ZERO_LOG_LEVEL=warn OMP_NUM_THREADS=1

launch=("$build/tools/zero-run/zero-run" -n "$ranks" --hostfile "$ZERO_NODES_HOSTFILE"
  --start-timeout 120)
while IFS= read -r arg; do launch+=("--mpi-arg=$arg"); done <<<"$ZERO_NODES_MPI_ARGS"
for arg in --mca btl tcp,self; do launch+=("--mpi-arg=$arg"); done

# Bytes every node has transmitted so far: "LOOPBACK NETWORK" summed over the nodes.
sent() {
  local lo=0 net=0 k
  for ((k = 0; k < nodes; k++)); do
    read -r l n < <(ip netns exec "zn-node$k" awk -F'[: ]+' \
      'NR > 2 {if ($2 == "lo") l += $11; else n += $11} END {printf "%.0f %.0f\n", l, n}' /proc/net/dev)
    lo=$((lo + l)) net=$((net + n))
  done
  echo "$lo $net"
}

layouts="flat hybrid"
[[ $stage == 3 ]] && layouts+=" hpz"
for layout in $layouts; do
  hybrid=false hpz=1
  [[ $layout == hybrid ]] && hybrid=true
  [[ $layout == hpz ]] && hpz=$slots
  cat >"$work/$layout.json" <<JSON
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 1,
  "bf16": {"enabled": true},
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": $stage, "hybrid_shard": $hybrid, "zero_hpz_partition_size": $hpz,
    "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": $reuse,
    "stage3_prefetch_bucket_size": 0,
    "zero_quantized_weights": $quantized, "zero_quantized_gradients": $quantized}
}
JSON
  declare -A before
  for steps in 1 3; do
    read -r lo0 net0 < <(sent)
    (cd "$work" && "${launch[@]}" -- "$build/tools/zero-train/zero-train" \
      --config "$work/$layout.json" --model "$model" --seq "$seq" --steps "$steps" \
      --data "$source_dir/data/fortunes.txt" --no-progress >"$work/train-$layout-$steps.out" 2>&1) ||
      { tail -20 "$work/train-$layout-$steps.out"; echo "zero-train failed ($layout)" >&2; exit 1; }
    read -r lo1 net1 < <(sent)
    before[$steps]="$((lo1 - lo0)) $((net1 - net0))"
  done
  "$build/tools/zero-mem/zero-mem" --device cpu --model "$model" --seq "$seq" \
    --nodes "$nodes" --ranks-per-node "$slots" --config "$work/$layout.json" --stage "$stage" \
    --json >"$work/mem-$layout.json"
  python3 - "$work/mem-$layout.json" "$layout" "$ranks" "$tol" ${before[1]} ${before[3]} <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
layout, ranks, tol = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
lo1, net1, lo3, net3 = map(int, sys.argv[5:9])
row = [r for r in plan["rows"] if r["offload"] == "none"][0]
step = row["step_lower_bound"]
want_intra, want_inter = step["intra_node_bytes"], step["inter_node_bytes"]
got_intra, got_inter = (lo3 - lo1) / 2 / ranks, (net3 - net1) / 2 / ranks
want, got = want_intra + want_inter, got_intra + got_inter
kib = lambda b: f"{b / 1024:9.1f} KiB"
print(f"{layout:<7} {row['layout']:<11} zero-mem: {kib(want_intra)} within, {kib(want_inter)} across"
      f" | measured: {kib(got_intra)} within, {kib(got_inter)} across"
      f" | total {got / want if want else 0:.3f}x", end="")
bad = abs(got - want) > tol * want
if layout == "hybrid":
    ratio = got_inter / want_inter if want_inter else 0
    print(f", across {ratio:.3f}x", end="")
    bad |= abs(got_inter - want_inter) > tol * want_inter
print("  FAIL" if bad else "")
for c in row["comm"]:
    print(f"          {c['bytes_per_rank'] / 1024:9.1f} KiB  {c['link']:<10} {c['ranks']} ranks  {c['what']}")
sys.exit(1 if bad else 0)
PY
done
