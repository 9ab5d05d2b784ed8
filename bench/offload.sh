#!/usr/bin/env bash
# bench/offload.sh: the NVMe-offloaded optimizer step figures in bench/results/, measured on
# this machine's disk.
#
#   bench/offload.sh [BUILD_DIR] [SWAP_DIR] [EXTRA zero-bench offload ARGS...]
#
# Builds nothing: BUILD_DIR (default build-cpu) must hold tools/zero-bench/zero-bench. SWAP_DIR
# (default .swap-bench in the repository) must be on a disk that takes O_DIRECT (not tmpfs).
# Writes
#   bench/results/offload_nvme.txt    zero-bench offload: the step over 50M and 100M elements of
#                                     AdamW state (sub-groups of 10M, 4 buffers) next to the
#                                     same I/O alone and the Adam alone, with 1 and 2 threads
#   bench/results/offload_nvme.jsonl  the same figures, one JSON line per run
#   bench/results/offload_speculate.txt   zero-bench speculate: the CPU-offloaded step after
#                                     backward and with super_offload, against max(compute,
#                                     the optimizer alone) and max(forward + backward, the
#                                     optimizer alone), with a timed stand-in for compute
#   bench/results/offload_speculate.jsonl
#   bench/results/offload_bigger.txt    bench/speculate_nvme.py: zero-train on llama-3.2-1b
#                                     with its parameters and optimizer on NVMe (stage 3,
#                                     bf16, one rank), the step after backward and with
#                                     super_offload, against max(forward + backward, the step
#                                     alone); needs zero-train in BUILD_DIR and about 40 GB of
#                                     disk under SWAP_DIR
#   bench/results/offload_bigger.json
# with a header naming the date, the machine and the commands. Exit status: the last failing
# zero-bench's, else 0. OFFLOAD_BENCH=nvme, speculate or bigger runs one of the three only.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${1:-build-cpu}
swap=${2:-.swap-bench}
[[ $# -gt 0 ]] && shift
[[ $# -gt 0 ]] && shift
extra=("$@")

bench=$build/tools/zero-bench/zero-bench
results=bench/results
if [[ ! -x $bench ]]; then
  echo "bench/offload.sh: $bench is missing; build it first:" \
       "cmake -S . -B $build && cmake --build $build --target zero-bench" >&2
  exit 1
fi
mkdir -p "$results" "$swap"
only=${OFFLOAD_BENCH:-}
overall=0
if [[ -z $only || $only == speculate ]]; then
  rm -f "$results/offload_speculate.jsonl"
  {
    status=0
    echo "# zero-bench speculate, $(date -u +%Y-%m-%dT%H:%MZ)"
    bash bench/machine.sh "$bench"
    echo "# median of 6 steps after a warm-up; the target is step <= 1.1 x max(compute, optimizer)"
    # compute as long as the optimizer's step alone (the default), then longer than it; buckets
    # and step groups of one module (6.25M elements) and of a quarter of one; the optimizer on
    # all the threads and on half of them (cpuadam_cores_perc).
    for compute in 0 400; do
      for bucket in 6250000 1562500; do
        for cores in 1 0.5; do
          command=("$bench" speculate --params 50e6 --modules 8 --threads 2 --steps 7
                   --bucket "$bucket" --cores-perc "$cores" --compute-ms "$compute"
                   --json "$results/offload_speculate.jsonl")
          echo
          echo "# command: ${command[*]}"
          ZERO_LOG_LEVEL=warn "${command[@]}" 2>&1 || status=$?
        done
      done
    done
    exit "$status"
  } | tee "$results/offload_speculate.txt"
  overall=${PIPESTATUS[0]}
fi
if [[ -z $only || $only == bigger ]]; then
  python3 bench/speculate_nvme.py --build "$build" --swap "$swap" --out "$results/offload_bigger" ||
    overall=$?
fi
[[ -n $only && $only != nvme ]] && exit "$overall"
rm -f "$results/offload_nvme.jsonl"
{
  status=0
  echo "# zero-bench offload, $(date -u +%Y-%m-%dT%H:%MZ)"
  bash bench/machine.sh "$bench"
  echo "# swap directory on $(findmnt -n -o SOURCE,FSTYPE -T "$swap" | xargs)"
  echo "# each figure is the best of 3 runs; the target is step <= 1.15 x max(I/O, Adam)"
  for elements in 50e6 100e6; do
    for threads in 1 2; do
      command=("$bench" offload "$swap" --elements "$elements" --sub-group 10e6 --buffers 4
               --threads "$threads" --repeats 3 --json "$results/offload_nvme.jsonl" "${extra[@]}")
      echo
      echo "# command: ${command[*]}"
      "${command[@]}" 2>&1 || status=$?
    done
  done
  exit "$status"
} | tee "$results/offload_nvme.txt"
status=${PIPESTATUS[0]}
rmdir "$swap" 2>/dev/null
((status != 0)) && exit "$status"
exit "$overall"
