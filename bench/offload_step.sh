#!/usr/bin/env bash
# bench/offload_step.sh: the optimizer-offloaded step on the timed CPU device against its floor
# (zero-bench offload-step; docs/offload.md, "The offloaded step as a pipeline"), measured on
# this machine: the engine's real schedule and host work, a GPU's copies and kernels.
#
#   bench/offload_step.sh [BUILD_DIR] [EXTRA zero-bench offload-step ARGS...]
#
# Builds nothing: BUILD_DIR (default build) must hold tools/zero-bench/zero-bench. Writes
#   bench/results/offload_step.txt    each mode's step against the floor, with where the time
#                                     went, and the trace's lanes of the last mode's step
#   bench/results/offload_step.jsonl  one JSON line per mode and thread count
#   bench/results/offload_step.trace.json  that step as a Chrome trace (chrome://tracing)
# with a header naming the date, the machine and the exact command. OMP_WAIT_POLICY=passive:
# the optimizer's OpenMP threads sleep between steps rather than spin, leaving the cores to
# the host adds and the device's stand-in threads, as a real host's spare cores would be.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${1:-build}
[[ $# -gt 0 ]] && shift
extra=("$@")
bench=$build/tools/zero-bench/zero-bench
results=bench/results
if [[ ! -x $bench ]]; then
  echo "bench/offload_step.sh: $bench is missing; build it first (make build)" >&2
  exit 1
fi
mkdir -p "$results"
rm -f "$results/offload_step.jsonl"
command=("$bench" offload-step --modes pageable,pinned,super_offload,super_offload_unchecked
         --json "$results/offload_step.jsonl" --trace "$results/offload_step.trace.json" "${extra[@]}")
# The same with the CPU optimizer on one thread, the other core left to the engine's own host
# work beside it (the hooks, the stand-in's hand-offs), as cpuadam_cores_perc leaves cores on a
# GPU's host: on two cores the two-thread optimizer shares them with that work.
one_thread=("$bench" offload-step --modes pinned,super_offload,super_offload_unchecked --threads 1
            --json "$results/offload_step.jsonl" "${extra[@]}")
# Gradient accumulation 4: the window's later micro-steps added on the host, then summed on the
# device (offload_optimizer.accumulate_on_device).
accumulating=("$bench" offload-step --modes pinned,super_offload,super_offload_unchecked --steps 8
              --accumulation 4 --json "$results/offload_step.jsonl" "${extra[@]}")
{
  echo "# $(date -u +%Y-%m-%d) bench/offload_step.sh"
  bash bench/machine.sh "$bench"
  echo "# OMP_WAIT_POLICY=passive ${command[*]}"
  OMP_WAIT_POLICY=passive "${command[@]}" 2>&1 | grep -v '\[info\]'
  status=${PIPESTATUS[0]}
  echo "# OMP_WAIT_POLICY=passive ${one_thread[*]}"
  OMP_WAIT_POLICY=passive "${one_thread[@]}" 2>&1 | grep -v '\[info\]'
  one_thread_status=${PIPESTATUS[0]}
  ((status == 0)) && status=$one_thread_status
  for on_device in no yes; do
    flag=()
    [[ $on_device == yes ]] && flag=(--accumulate-on-device)
    echo "# OMP_WAIT_POLICY=passive ${accumulating[*]} ${flag[*]}"
    OMP_WAIT_POLICY=passive "${accumulating[@]}" "${flag[@]}" 2>&1 | grep -v '\[info\]'
    accumulating_status=${PIPESTATUS[0]}
    ((status == 0)) && status=$accumulating_status
  done
  echo "# the first run's last mode's median step, by lane (busy: the spans' sum; first and last: ms into the step)"
  python3 - "$results/offload_step.trace.json" <<'PY'
import collections, json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
lanes = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
rows = collections.defaultdict(lambda: [0, 0.0, float("inf"), 0.0])
for e in events:
    if e["ph"] != "X":
        continue
    row = rows[(lanes[e["tid"]], e["name"])]
    row[0] += 1
    row[1] += e["dur"] / 1e3
    row[2] = min(row[2], e["ts"] / 1e3)
    row[3] = max(row[3], (e["ts"] + e["dur"]) / 1e3)
for (lane, name), (n, busy, first, last) in sorted(rows.items(), key=lambda kv: kv[1][2]):
    print(f"#   {lane:<10} {name:<13} {n:4d} x, busy {busy:7.2f} ms, {first:7.2f} to {last:7.2f} ms")
PY
  exit "$status"
} > "$results/offload_step.txt"
status=$?
cat "$results/offload_step.txt"
exit $status
