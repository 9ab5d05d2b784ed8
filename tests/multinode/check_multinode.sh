#!/usr/bin/env bash
# tests/multinode/check_multinode.sh: one multinode case, run by tests/multinode/nodes.sh on node
# 0 of its nodes (ctest -L multinode; tests/CMakeLists.txt names the cases).
#
#   nodes.sh NODES SLOTS -- check_multinode.sh CASE ZERO_RUN TESTS_DIR
#
# Every case starts its ranks with zero-run --hostfile over all the nodes, through Open MPI's own
# remote start (nodes.sh's agent), ranks filling each node's slots in turn:
#   hosts        every rank runs on the node its slot says (hostname: zn-node0, zn-node1, ...)
#   probe        the MPI probe: every rank starts, and an all-reduce across the nodes agrees
#   collectives  the multirank Catch program: zero's MPI communicator, the engine's memory,
#                fetch, swap and checkpoint cases, but the checkpoint placement matrix (at 4
#                ranks it makes the same choices as "multirank: collectives on 4 ranks", on one
#                node; saving and resuming across nodes is the checkpoint case below)
#   checkpoint   a checkpoint saved by every rank of every node, resumed in a new job by one
#                more rank than a node has on node 0 alone (2 x 2 -> 1 x 3 at the defaults),
#                within fp32 rounding (tests/multirank/engine_checkpoint.cpp, set reshard)
#   hybrid       hybrid sharding with a shard group per node (hybrid_shard): the engine's
#                equivalence cases at stages 1-3, every offload (engine_equivalence --hybrid-node),
#                and the engine's own line saying it made one group per node
#   hpz          ZeRO++ hpZ with a secondary group per node: the same bits as flat stage 3
#                (engine_equivalence --hpz)
#   equivalence  the engine's flat equivalence matrix, stages 0-3 with and without offload
#   killed       the last rank (on the last node) is killed: the job ends at once with its
#                status, and zero-run names the rank and its node
#   bytes        the bytes each rank sends: zero-bench comm --net-bytes against a ring's for
#                each collective, and a step's (bench/multinode_bytes.sh) against zero-mem's
#                model, flat and hybrid, at stages 1 and 3 (reuse distance 0 and the
#                default), within 15%
#   stalled      the last node never starts (nodes.sh's `stalled`): zero-run's start-up bound
#                ends the job with 124, naming the ranks and the node where none started
set -uo pipefail
case_name=$1 zero_run=$2 tests=$3
build=$(cd "$tests/.." && pwd)  # the build tree: its tools/ beside tests/
source_dir=$(cd "$(dirname "$0")/../.." && pwd)

fail() {
  echo "FAIL (multinode $case_name): $*" >&2
  exit 1
}
[[ -n ${ZERO_NODES_HOSTFILE:-} ]] || fail "run me through tests/multinode/nodes.sh"
nodes=$(wc -l <"$ZERO_NODES_HOSTFILE")
slots=$(awk -F'slots=' 'NR == 1 {print $2}' "$ZERO_NODES_HOSTFILE")
ranks=$((nodes * slots))
launch=("$zero_run" -n "$ranks" --hostfile "$ZERO_NODES_HOSTFILE" --start-timeout 120)
while IFS= read -r arg; do launch+=("--mpi-arg=$arg"); done <<<"$ZERO_NODES_MPI_ARGS"
out=$ZERO_NODES_WORK/out
export ZERO_LOG_LEVEL=warn

case $case_name in
hosts)
  "${launch[@]}" -- sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname)"' >"$out" 2>&1 ||
    { cat "$out"; fail "zero-run exited non-zero"; }
  for ((r = 0; r < ranks; r++)); do
    want="rank $r on zn-node$((r / slots))"
    grep -qx "$want" "$out" || { cat "$out"; fail "no line '$want'"; }
  done
  ;;
probe)
  "${launch[@]}" -- "$tests/zero_mpi_probe" >"$out" 2>&1 || { cat "$out"; fail "the probe failed"; }
  oks=$(grep -c "of $ranks: .*allreduce ok" "$out")
  [[ $oks -eq $ranks ]] || { cat "$out"; fail "$oks of $ranks ranks report the all-reduce"; }
  ;;
collectives)
  (cd "$ZERO_NODES_WORK" && "${launch[@]}" -- "$tests/zero_multirank_tests" \
    "~*round-trip bit for bit in every placement") >"$out" 2>&1 ||
    { tail -60 "$out"; fail "the multirank cases failed"; }
  grep -q "All tests passed" "$out" || { tail -60 "$out"; fail "no 'All tests passed'"; }
  ;;
checkpoint)
  dir=$ZERO_NODES_WORK/checkpoint
  mkdir -p "$dir"
  "${launch[@]}" -- "$tests/zero_engine_checkpoint" save "$dir" reshard >"$out" 2>&1 ||
    { tail -40 "$out"; fail "saving on $nodes nodes failed"; }
  echo "zn-node0 slots=$((slots + 1))" >"$ZERO_NODES_WORK/one-node"
  one=("$zero_run" -n $((slots + 1)) --hostfile "$ZERO_NODES_WORK/one-node" --start-timeout 120)
  while IFS= read -r arg; do one+=("--mpi-arg=$arg"); done <<<"$ZERO_NODES_MPI_ARGS"
  "${one[@]}" -- "$tests/zero_engine_checkpoint" resume "$dir" reshard >"$out" 2>&1 ||
    { tail -40 "$out"; fail "resuming on one node at $((slots + 1)) ranks failed"; }
  ;;
hybrid)
  (cd "$ZERO_NODES_WORK" && ZERO_LOG_LEVEL=info "${launch[@]}" -- \
    "$tests/zero_engine_equivalence" --hybrid-node) >"$out" 2>&1 ||
    { grep -v '^\[' "$out" | tail -40; fail "the hybrid cases failed"; }
  grep -q "0 case(s) failed" "$out" || { tail -40 "$out"; fail "no '0 case(s) failed'"; }
  want="on $ranks ranks (hybrid: $nodes shard groups of $slots ranks)"
  grep -qF "$want" "$out" || { tail -40 "$out"; fail "the engine never said '$want'"; }
  ;;
hpz)
  (cd "$ZERO_NODES_WORK" && "${launch[@]}" -- "$tests/zero_engine_equivalence" --hpz) \
    >"$out" 2>&1 || { grep -v '^\[' "$out" | tail -40; fail "the hpZ cases failed"; }
  grep -q "0 case(s) failed" "$out" || { tail -40 "$out"; fail "no '0 case(s) failed'"; }
  ;;
equivalence)
  (cd "$ZERO_NODES_WORK" && "${launch[@]}" -- "$tests/zero_engine_equivalence") >"$out" 2>&1 ||
    { grep -v '^\[' "$out" | tail -40; fail "the equivalence cases failed"; }
  grep -q "0 case(s) failed" "$out" || { tail -40 "$out"; fail "no '0 case(s) failed'"; }
  ;;
killed)
  last=$((ranks - 1))
  start=$SECONDS
  "${launch[@]}" -- sh -c "[ \"\$OMPI_COMM_WORLD_RANK\" = $last ] && kill -9 \$\$; sleep 60" \
    >"$out" 2>&1
  status=$?
  ((status == 137)) || { cat "$out"; fail "zero-run exited $status, not 137 (128 + SIGKILL)"; }
  ((SECONDS - start < 45)) || { cat "$out"; fail "the job took $((SECONDS - start)) s to end"; }
  want="zero-run: rank $last on zn-node$((nodes - 1)) \\(pid [0-9]+\\) was killed by signal 9"
  grep -qE "$want" "$out" || { cat "$out"; fail "no line '$want'"; }
  ;;
bytes)
  bench=("${launch[@]}" --mpi-arg=--mca --mpi-arg=btl --mpi-arg=tcp,self)
  "${bench[@]}" -- "$build/tools/zero-bench/zero-bench" comm --backend mpi --dtype bf16 --min-bytes 1M \
    --max-bytes 1M --iters 10 --ops reduce_scatter --ops all_gather --ops all_reduce \
    --net-bytes --json "$ZERO_NODES_WORK/comm.jsonl" >"$out" 2>&1 ||
    { tail -30 "$out"; fail "zero-bench comm --net-bytes failed"; }
  python3 - "$ZERO_NODES_WORK/comm.jsonl" <<'PY' || { cat "$out"; fail "a collective's bytes are not a ring's"; }
import json, sys
bad = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    sent = r["within_node_bytes_per_rank"] + r["across_nodes_bytes_per_rank"]
    ok = abs(sent - r["ring_bytes_per_rank"]) <= 0.05 * r["ring_bytes_per_rank"]
    bad += not ok
    print(f"{r['collective']:<15} {sent:10.0f} B per rank sent, a ring's {r['ring_bytes_per_rank']:10.0f}{'' if ok else '  FAIL'}")
sys.exit(1 if bad else 0)
PY
  # Stage 3 twice: every parameter gathered again in backward (reuse distance 0), and the
  # default reuse distance, which keeps this small model gathered from forward to backward;
  # then ZeRO++'s quantized gathers and gradients (int8 chunks, about half of bf16's bytes).
  for run in "1 0 0" "3 0 0" "3 1000000000 0" "3 0 1"; do
    read -r stage reuse quant <<<"$run"
    bash "$source_dir/bench/multinode_bytes.sh" "$build" tiny 32 "$stage" 0.15 "$reuse" "$quant" \
      >"$out" 2>&1 ||
      { cat "$out"; fail "stage $stage, reuse $reuse, quantized $quant: the measured bytes differ from zero-mem's"; }
    cat "$out"
  done
  ;;
stalled)
  echo "zn-node$((nodes - 1))" >"$ZERO_NODES_WORK/stalled"
  start=$SECONDS
  stalled=("$zero_run" -n "$ranks" --hostfile "$ZERO_NODES_HOSTFILE" --start-timeout 5)
  while IFS= read -r arg; do stalled+=("--mpi-arg=$arg"); done <<<"$ZERO_NODES_MPI_ARGS"
  "${stalled[@]}" -- "$tests/zero_mpi_probe" >"$out" 2>&1
  status=$?
  rm -f "$ZERO_NODES_WORK/stalled"
  ((status == 124)) || { cat "$out"; fail "zero-run exited $status, not 124"; }
  ((SECONDS - start < 70)) || { cat "$out"; fail "the job took $((SECONDS - start)) s to end"; }
  want="did not start within 15 s (--start-timeout, and 10 s more for the ranks' own bound"
  grep -qF "$want" "$out" || { cat "$out"; fail "no '$want'"; }
  want="; zn-node$((nodes - 1)) did not answer"
  grep -qF "$want" "$out" || { cat "$out"; fail "no '$want'"; }
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "ok: multinode $case_name ($nodes nodes x $slots slots)"
